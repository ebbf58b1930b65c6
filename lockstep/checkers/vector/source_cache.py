"""The generated array kernels kept on disk, named by everything their generation reads.

Generating a machine's kernels (translating every action x parameter tuple, tidying the text) takes
0.1-0.3 s at dp-pause's larger sizes and is the same every run of an unchanged model. ``key`` hashes
what ``kernels.compile_kernels`` reads (the finished machine's name, variables, actions, properties,
final predicate and symmetry declarations, all frozen dataclasses whose ``repr`` spells every field;
bound variables renamed in order of appearance, as a machine built twice names them differently)
with the symmetry flag and the text of every module of ``lockstep.spec`` and
``lockstep.checkers.vector`` (so a change to the generator or the layout writes a new entry). Entries
live under ``$LOCKSTEP_CACHE`` (default: the temporary directory's ``lockstep-fused``) in
``kernels/``; an unreadable or malformed one is ignored and written again, writes go to a temporary
file renamed into place, and a folder that cannot be written is skipped. ``LOCKSTEP_KERNEL_CACHE=0``
turns it off.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from lockstep.spec.machine import Machine
from lockstep.spec.sorts import Value

_BOUND = re.compile(r"Bound\(name='([^']*)'")
Generated = tuple[str, list[tuple[int, tuple[Value, ...]]], int, int]  # source, tuples, skipped, permutations


def folder(name: str) -> Path:
    """A cache folder under ``$LOCKSTEP_CACHE`` (default: the temporary directory's ``lockstep-fused``)."""
    root = Path(os.environ.get("LOCKSTEP_CACHE", str(Path(tempfile.gettempdir()) / "lockstep-fused")))
    return root / name


@cache
def _generator() -> bytes:
    """A digest of the generator's own modules (the spec language and the vector package)."""
    digest = hashlib.sha256()
    for package in (Path(__file__).parent, Path(__file__).parents[2] / "spec"):
        for module in sorted(package.glob("*.py")):
            digest.update(module.name.encode() + module.read_bytes())
    return digest.digest()


def key(machine: Machine, symmetry: bool) -> str:
    """The cache key of a finished machine's kernels."""
    described = repr(
        (
            machine.name,
            machine.variables,
            machine.actions,
            machine.properties,
            machine.final,
            machine.symmetric,
            symmetry,
        )
    )
    names: dict[str, str] = {}  # bound variables renamed by first occurrence (their names come from a counter)
    described = _BOUND.sub(lambda found: f"Bound(name='{names.setdefault(found[1], f'b{len(names)}')}'", described)
    return hashlib.sha256(_generator() + described.encode()).hexdigest()[:32]


def read(name: str) -> Generated | None:
    """The entry under ``name``, or None when there is none (or it cannot be read back)."""
    if os.environ.get("LOCKSTEP_KERNEL_CACHE") == "0":
        return None
    try:
        payload = json.loads((folder("kernels") / f"{name}.json").read_text())
        tuples = ast.literal_eval(payload["tuples"])
        source, skipped, permutations = payload["source"], payload["skipped"], payload["permutations"]
    except (OSError, ValueError, KeyError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if not (isinstance(source, str) and isinstance(tuples, list) and isinstance(skipped, int)):
        return None
    if not isinstance(permutations, int) or payload.get("key") != name:
        return None
    return source, tuples, skipped, permutations


def write(name: str, generated: Generated) -> None:
    """Keep ``generated`` under ``name`` unless its tuples do not read back as they are."""
    source, tuples, skipped, permutations = generated
    spelled = repr(tuples)
    try:
        if os.environ.get("LOCKSTEP_KERNEL_CACHE") == "0" or ast.literal_eval(spelled) != tuples:
            return
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return  # an argument that is not a literal: not cached
    payload: dict[str, Any] = {
        "key": name,
        "source": source,
        "tuples": spelled,
        "skipped": skipped,
        "permutations": permutations,
    }
    target = folder("kernels")
    try:
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=target, suffix=".tmp", delete=False) as handle:
            json.dump(payload, handle)
        os.replace(handle.name, target / f"{name}.json")
    except OSError:
        return


__all__ = ["folder", "key", "read", "write"]
