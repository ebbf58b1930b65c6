"""``vllm check --vllm-source``: a user's vLLM tree laid over the installed build (``source_overlay``).

The comparison and the overlay run on a small tree with vLLM's layout (the pause path of
``vllm/v1/engine/core.py`` as v0.32.0 has it, an unrelated module, a compiled part) standing for the
installed build, so every refusal and the overlay's contents are checked without vLLM; the real
engine run over a changed tree is in tests/test_real_vllm.py (it needs the Python that has vLLM).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lockstep.real_vllm.source_overlay import SourceRefused, differences, prepare

CORE = """class EngineCoreProc:
    def pause_scheduler(self, mode):
        return self._pause_complete()

    def _pause_complete(self) -> bool:
        return not self.has_work()


class DPEngineCoreProc(EngineCoreProc):
    def _pause_complete(self) -> bool:
        self.pending_pause = True
        self.engines_running = True

        return False
"""
SAMPLING = """class SamplingParams:
    def clone(self):
        return SamplingParams()
"""


@pytest.fixture
def installed(tmp_path: Path) -> Path:
    """A vllm package: __init__, v1/engine/core.py, sampling_params.py, a compiled part, a data file."""
    package = tmp_path / "site-packages" / "vllm"
    (package / "v1" / "engine").mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "0.32.0"\n')
    (package / "_version.py").write_text('__version__ = "0.32.0"\n')
    (package / "v1" / "__init__.py").write_text("")
    (package / "v1" / "engine" / "__init__.py").write_text("")
    (package / "v1" / "engine" / "core.py").write_text(CORE)
    (package / "sampling_params.py").write_text(SAMPLING)
    (package / "_C.abi3.so").write_bytes(b"\x7fELF compiled")
    (package / "config.json").write_text("{}\n")
    return package


def checkout(installed: Path, root: Path) -> Path:
    """A checkout of the same sources: ``root/vllm`` without the build's products (``_version.py``, the .so)."""
    package = root / "vllm"
    shutil.copytree(installed, package, ignore=shutil.ignore_patterns("_version.py", "*.so"))
    return root


def test_an_unchanged_checkout_lays_nothing_over_the_installed_tree(installed: Path, tmp_path: Path) -> None:
    source = checkout(installed, tmp_path / "checkout")
    overlay = prepare("dp-pause", "0.32.0", installed, source, tmp_path / "into")
    assert overlay.changed == () and differences(installed, source / "vllm") == ([], [])
    assert (overlay.root / "vllm" / "_C.abi3.so").resolve() == (installed / "_C.abi3.so").resolve()


def test_a_change_to_the_pause_path_is_laid_over_and_names_its_action(installed: Path, tmp_path: Path) -> None:
    source = checkout(installed, tmp_path / "checkout")
    core = source / "vllm" / "v1" / "engine" / "core.py"
    core.write_text(CORE.replace("        self.engines_running = True\n", ""))
    overlay = prepare("dp-pause", "0.32.0", installed, source, tmp_path / "into")
    assert overlay.changed == ("v1/engine/core.py",)
    assert any(entry.startswith("handle_pause: DPEngineCoreProc._pause_complete") for entry in overlay.touched)
    laid = overlay.root / "vllm"
    assert not (laid / "v1" / "engine" / "core.py").is_symlink()
    assert (laid / "v1" / "engine" / "core.py").read_text() == core.read_text()
    assert (laid / "sampling_params.py").resolve() == (installed / "sampling_params.py").resolve()
    assert (laid / "_version.py").read_text() == (installed / "_version.py").read_text()  # the build's, kept
    assert (installed / "v1" / "engine" / "core.py").read_text() == CORE  # the installed tree is untouched
    # what the run's processes import: PYTHONPATH first, the user's module over the installed one
    program = "import vllm.v1.engine.core as core, inspect; print('engines_running = True' in inspect.getsource(core))"
    imported = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=f"{overlay.root}{os.pathsep}{installed.parent}"),
    )
    assert imported.stdout.strip() == "False", imported.stderr


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        (lambda package: (package / "_C.abi3.so").write_bytes(b"\x7fELF rebuilt"), "compiled parts differ"),
        (lambda package: (package / "spinloop.abi3.so").write_bytes(b"\x7fELF new"), "compiled parts differ"),
        (
            lambda package: (package / "sampling_params.py").write_text(SAMPLING.replace("()\n", "(seed=1)\n", 1)),
            "vllm/sampling_params.py (SamplingParams.clone)",
        ),
        (lambda package: (package / "config.json").write_text('{"x": 1}\n'), "data files differ"),
        (lambda package: (package / "helpers.py").write_text("X = 1\n"), "files the installed vLLM lacks"),
    ],
    ids=["changed-so", "new-so", "unrelated-python", "data", "new-file"],
)
def test_compiled_or_unrelated_differences_are_refused(installed: Path, tmp_path: Path, change, refusal: str) -> None:  # type: ignore[no-untyped-def]
    source = checkout(installed, tmp_path / "checkout")
    (source / "vllm" / "v1" / "engine" / "core.py").write_text(
        CORE.replace("        self.engines_running = True\n", "")
    )
    change(source / "vllm")
    with pytest.raises(SourceRefused) as refused:
        prepare("dp-pause", "0.32.0", installed, source, tmp_path / "into")
    assert refusal in str(refused.value) and f"--vllm-source {source}" in str(refused.value)


def test_a_folder_without_a_vllm_package_is_refused(installed: Path, tmp_path: Path) -> None:
    with pytest.raises(SourceRefused, match="no vllm package there"):
        prepare("dp-pause", "0.32.0", installed, tmp_path, tmp_path / "into")
