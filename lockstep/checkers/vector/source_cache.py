"""The generated array kernels kept on disk, named by everything their generation reads.

Generating a machine's kernels (translating every action x parameter tuple, tidying the text) is
the same every run of an unchanged model (docs/performance.md has its cost). ``key`` hashes
what ``kernels.compile_kernels`` reads (the finished machine's name, variables, actions, properties,
final predicate and symmetry declarations, all frozen dataclasses whose ``repr`` spells every field;
bound variables renamed in order of appearance, as a machine built twice names them differently)
with the symmetry flag and the text of every module of ``lockstep.spec`` and
``lockstep.checkers.vector`` (so a change to the generator or the layout writes a new entry). Entries
are signed entries of ``lockstep.cache`` (kind ``kernels``: the user's private cache, each verified
before its source is executed); one that does not verify, parse or compile is removed, with a
note, and made again.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from lockstep.cache import Store
from lockstep.spec.machine import Machine
from lockstep.spec.sorts import Value

_BOUND = re.compile(r"Bound\(name='([^']*)'")
_STORE = Store("kernels")
Generated = tuple[str, list[tuple[int, tuple[Value, ...]]], int, int]  # source, tuples, skipped, permutations


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


def read(name: str) -> tuple[Generated, Path] | None:
    """The verified entry under ``name`` and its file, or None when there is none; an entry that
    verifies but does not parse as one is removed (``Store.reject``) and made again."""
    entry = _STORE.read(name, ".json")
    if entry is None:
        return None
    try:
        payload = json.loads(entry.data)
        tuples = ast.literal_eval(payload["tuples"])
        source, skipped, permutations = payload["source"], payload["skipped"], payload["permutations"]
        if not (isinstance(source, str) and isinstance(tuples, list) and isinstance(skipped, int)):
            raise TypeError("a field of the wrong type")
        if not isinstance(permutations, int) or payload.get("key") != name:
            raise TypeError("a field of the wrong type or another key")
    except (ValueError, KeyError, TypeError, SyntaxError, MemoryError, RecursionError) as error:
        _STORE.reject(entry.path, f"it does not parse ({type(error).__name__})")
        return None
    return (source, tuples, skipped, permutations), entry.path


def reject(path: Path, why: str) -> None:
    """Remove the entry at ``path`` (its code did not compile or load), to be made again."""
    _STORE.reject(path, why)


def write(name: str, generated: Generated) -> None:
    """Keep ``generated`` under ``name`` unless its tuples do not read back as they are."""
    source, tuples, skipped, permutations = generated
    spelled = repr(tuples)
    try:
        if ast.literal_eval(spelled) != tuples:
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
    _STORE.write(name, ".json", json.dumps(payload).encode())


__all__ = ["key", "read", "reject", "write"]
