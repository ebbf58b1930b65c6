"""A user's vLLM checkout laid over the installed build, for ``lockstep vllm check --vllm-source PATH``.

A vLLM engineer's change to the pause or broadcast code is pure Python; building vLLM to check it
would take an hour. ``prepare`` compares the user's ``vllm`` package (``PATH/vllm``, or ``PATH``
itself when it is the package) with the installed one, file by file, and accepts the difference
only where the real-engine check means something for it:

- a compiled part (``.so``, ``.pyd``, ``.dylib``) that differs, or one the installed build lacks, is
  refused: the installed binaries would not match the user's sources;
- a Python file that differs must change a function that an action of the protocol's base-release
  variant mirrors (``mirrors=``), or one such a function calls (``lockstep.changes``'s reading of
  a diff and of a tree); any other differing file, a file the installed build lacks, or a differing
  data file is refused, named with the functions it changes, so the recording is never of
  changes the protocol's model says nothing about;
- files the user's tree lacks (a checkout has no build products, e.g. ``_version.py``) keep the
  installed ones.

The accepted files are laid over the installed tree in a private folder (``into/vllm``: a folder per
package folder, each installed file linked, the user's changed files copied) that the run puts first
on ``PYTHONPATH``, so the driver and every process vLLM spawns import the changed modules and the
installed binaries; the installed vLLM is not touched. A refusal is a ``SourceRefused`` (a usage
error, exit 2), before vLLM starts.
"""

from __future__ import annotations

import difflib
import filecmp
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lockstep.spec.protocol import UsageError

COMPILED = (".so", ".pyd", ".dylib")
SKIPPED_FOLDERS = ("__pycache__",)
SHOWN = 8  # files named in a refusal


class SourceRefused(UsageError):
    """A ``--vllm-source`` tree the check cannot use; the message names the files and why."""


@dataclass(frozen=True)
class SourceOverlay:
    """The prepared overlay: ``root`` goes first on ``PYTHONPATH``; ``changed`` are the files (under
    ``vllm/``) taken from the user's tree, ``touched`` the protocol's actions whose mirrored functions
    they change (``action: function (file:line)``)."""

    source: Path
    root: Path
    changed: tuple[str, ...]
    touched: tuple[str, ...]

    def describe(self) -> str:
        if not self.changed:
            return f"{self.source}: the same as the installed vLLM (nothing to lay over it)"
        actions = sorted({entry.partition(":")[0] for entry in self.touched})
        return (
            f"{self.source}: {len(self.changed)} changed file(s) laid over the installed vLLM: "
            f"{', '.join('vllm/' + name for name in self.changed)}"
            + (f"; actions whose mirrored code changed: {', '.join(actions)}" if actions else "")
        )


def installed_package() -> Path:
    """The folder of the importable ``vllm`` package (``NotInstalled`` if there is none)."""
    import importlib.util

    from lockstep.real_vllm.releases import INSTALL_HINT, NotInstalled

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise NotInstalled(f"vLLM is not installed in this Python; {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations)))


def package_of(source: Path) -> Path:
    """The ``vllm`` package folder of ``source`` (a checkout holding ``vllm/``, or the package itself)."""
    if (source / "vllm" / "__init__.py").is_file():
        return source / "vllm"
    if (source / "__init__.py").is_file():
        return source
    raise SourceRefused(
        f"--vllm-source {source}: no vllm package there (neither {source}/vllm/__init__.py nor __init__.py)"
    )


def _files(package: Path) -> Iterator[str]:
    """Every file below ``package`` (relative, ``/``-separated), bytecode caches left out."""
    for folder, folders, files in os.walk(package):
        folders[:] = sorted(name for name in folders if name not in SKIPPED_FOLDERS)
        for name in sorted(files):
            if not name.endswith((".pyc", ".pyo")):
                yield Path(folder, name).relative_to(package).as_posix()


def differences(installed: Path, user: Path) -> tuple[list[str], list[str]]:
    """The files of ``user`` that differ from ``installed``'s, and those ``installed`` lacks."""
    changed, added = [], []
    for name in _files(user):
        theirs = installed / name
        if not theirs.is_file():
            added.append(name)
        elif not filecmp.cmp(theirs, user / name, shallow=False):
            changed.append(name)
    return changed, added


def _diff(installed: Path, user: Path, name: str) -> str:
    before = (installed / name).read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    after = (user / name).read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    return "".join(difflib.unified_diff(before, after, f"a/vllm/{name}", f"b/vllm/{name}"))


def _refuse(source: Path, why: str, names: list[str]) -> SourceRefused:
    shown = ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
    return SourceRefused(f"--vllm-source {source}: {why}: {shown}")


def lay_over(installed: Path, user: Path, changed: list[str], into: Path) -> Path:
    """``into/vllm``: the installed tree, each file linked, with ``changed`` copied from ``user``; ``into``."""
    target = into / "vllm"
    replaced = set(changed)
    for folder, folders, files in os.walk(installed):
        folders[:] = [name for name in folders if name not in SKIPPED_FOLDERS]
        relative = Path(folder).relative_to(installed)
        (target / relative).mkdir(parents=True, exist_ok=True)
        for name in files:
            key = (relative / name).as_posix()
            if key in replaced or name.endswith((".pyc", ".pyo")):
                continue
            (target / relative / name).symlink_to(Path(folder, name).resolve())
    for name in changed:
        shutil.copyfile(user / name, target / name)
    return into


def prepare(protocol: str, release: str, installed: Path, source: Path, into: Path) -> SourceOverlay:
    """Check ``source`` against the ``installed`` vLLM package for ``protocol`` at ``release`` (see the
    module doc) and lay it over into ``into`` (an empty folder); ``SourceRefused`` if it cannot be used."""
    from lockstep.changes import changed_functions, mirrored_names, plan, read_tree
    from lockstep.models import get_protocol

    user = package_of(source)
    changed, added = differences(installed, user)
    compiled = [name for name in changed + added if name.endswith(COMPILED)]
    if compiled:
        raise _refuse(
            source,
            "compiled parts differ from the installed build (--vllm-source takes pure-Python changes; "
            "build and install that vLLM to check it)",
            [f"vllm/{name}" for name in compiled],
        )
    if added:
        raise _refuse(
            source, f"files the installed vLLM lacks, which no {protocol} action mirrors", [f"vllm/{n}" for n in added]
        )
    data = [name for name in changed if not name.endswith(".py")]
    if data:
        raise _refuse(source, f"data files differ, which no {protocol} action mirrors", [f"vllm/{n}" for n in data])
    lay_over(installed, user, changed, into)
    if not changed:
        return SourceOverlay(source, into, (), ())
    model = get_protocol(protocol)
    diff = "".join(_diff(installed, user, name) for name in changed)
    functions = changed_functions(diff, "--vllm-source", source=into)
    variant = model.release_variant(release)
    names = {
        name
        for variant_name in ([variant.name] if variant is not None else [model.default_variant])
        for action in model.instance(variant_name).machine().actions
        for name in mirrored_names(action.mirrors)
    }
    found = plan(functions, [model], release, read_tree(into, names))
    related = {item.function.path for entry in found.protocols for item in entry.touched}
    related |= {item.function.path for item in found.not_modelled}
    unrelated = [name for name in changed if f"vllm/{name}" not in related]
    if unrelated:
        by_file = {
            name: [function.name for function in functions if function.path == f"vllm/{name}"] for name in unrelated
        }
        raise _refuse(
            source,
            f"files differ whose changes no {protocol} action mirrors (nor a function one calls)",
            [f"vllm/{name} ({', '.join(by_file[name]) or 'no function'})" for name in unrelated],
        )
    touched = tuple(
        sorted(
            {
                f"{item.action}: {item.function.name} ({item.function.path}:{item.function.line})"
                for entry in found.protocols
                for item in entry.touched
            }
        )
    )
    return SourceOverlay(source, into, tuple(changed), touched)


__all__ = [
    "COMPILED",
    "SourceOverlay",
    "SourceRefused",
    "differences",
    "installed_package",
    "lay_over",
    "package_of",
    "prepare",
]
