"""``lockstep vllm check dp-pause --vllm-source TREE`` on the real vLLM (skipped where ``import vllm`` fails;
run it with the Python that has vLLM, as tests/test_real_vllm.py).

TREE is a copy of the installed vLLM 0.32.0 package (each file linked to the installed one). Unchanged,
the recording conforms to the release's model; with one line of ``DPEngineCoreProc.resume_scheduler``
changed so that the resume no longer all-reduces over the DP group before the ranks step again (the
barrier the post-fix pause path added), the same scenario's recording diverges from it. A changed
file no dp-pause action mirrors, or a changed compiled part, is refused (exit 2) before vLLM starts.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from test_real_vllm import _WHY, vllm_check

pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"needs a working vLLM: {_WHY}")

BARRIER = "        has_global_unfinished = ParallelConfig.has_unfinished_dp(\n"
NO_BARRIER = "        has_global_unfinished = True or ParallelConfig.has_unfinished_dp(\n"


def installed_package() -> Path:
    from lockstep.real_vllm.source_overlay import installed_package as found

    return found()


def linked_copy(into: Path) -> Path:
    """``into/vllm``: the installed package, each file a link to the installed one."""
    shutil.copytree(
        installed_package(),
        into / "vllm",
        copy_function=lambda source, target: os.symlink(os.path.realpath(source), target),
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return into


def replace_file(path: Path, text: str | bytes) -> None:
    """Write ``path`` as a file of its own (never through the link into the installed vLLM)."""
    path.unlink()
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def test_a_resume_without_its_barrier_diverges_where_the_unchanged_tree_conforms(tmp_path: Path) -> None:
    source = linked_copy(tmp_path / "checkout")
    code, unchanged, _ = vllm_check(tmp_path / "unchanged", "--vllm-source", str(source))
    assert (code, unchanged["verdict"]) == (0, "conforms"), unchanged["reason"]
    core = source / "vllm" / "v1" / "engine" / "core.py"
    text = core.read_text()
    assert text.count(BARRIER) == 1
    replace_file(core, text.replace(BARRIER, NO_BARRIER))
    code, changed, err = vllm_check(tmp_path / "changed", "--vllm-source", str(source))
    assert "vllm/v1/engine/core.py" in err and "handle_resume" in err
    assert (code, changed["verdict"]) == (1, "diverges"), changed["reason"]
    assert (installed_package() / "v1" / "engine" / "core.py").read_text() == text  # the installed vLLM untouched


@pytest.mark.parametrize(
    ("name", "content", "refusal"),
    [
        ("sampling_params.py", None, "no dp-pause action mirrors"),
        ("_C.abi3.so", b"\x7fELF not the installed build", "compiled parts differ"),
    ],
    ids=["unrelated-python", "compiled"],
)
def test_an_unrelated_or_compiled_change_is_refused_before_vllm_starts(
    tmp_path: Path, name: str, content: bytes | None, refusal: str
) -> None:
    source = linked_copy(tmp_path / "checkout")
    path = source / "vllm" / name
    replace_file(path, content if content is not None else path.read_text() + "\n# tidied\nX = 1\n")
    code, error, err = vllm_check(tmp_path / "trace", "--vllm-source", str(source))
    assert code == 2, err
    assert refusal in err and f"vllm/{name}" in err
    assert not (tmp_path / "trace").exists() or not any((tmp_path / "trace").iterdir())  # vLLM never ran
