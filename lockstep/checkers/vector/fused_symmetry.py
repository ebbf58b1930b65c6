"""The fused kernel of symmetry: the generated ``canonical`` recompiled to one Triton kernel.

``canonical(W)`` (``images.py``) computes, for every permutation of the symmetric ranks, each
state's image as bit moves and table lookups, and keeps the least image (words compared in order).
As array kernels on a GPU that is hundreds of launches per chunk, so with symmetry ``bfs-gpu`` was
slower than without it; here one program takes a block of states, builds every image in registers
and keeps the least. The expressions are the generated ones, only spelled for Triton (``fused``'s
spelling: ``W[i]`` a loaded word, lookups in the shared table buffer); nothing here can fail. The
same program writes each representative's fingerprint (the backends' 64-bit mix) to ``PARENT``, so
that with symmetry a chunk's successors cost the kernel launches they cost without it.
"""

from __future__ import annotations

import ast

from lockstep.checkers.vector.backend import _MULTIPLY_1, _MULTIPLY_2, _SEED
from lockstep.checkers.vector.fused import _fail, _header, _spelled, _Spelling


def _fingerprint_lines(words: int) -> list[str]:
    """``Backend.fingerprint`` of the ``BEST_*`` words, stored to ``PARENT``."""
    lines = [f"    HASH = tl.full([BLOCK], {_SEED:#x}, tl.uint64)"]
    for word in range(words):
        lines += [
            f"    HASH = (HASH ^ BEST_{word}.to(tl.uint64, bitcast=True)) * {_MULTIPLY_1:#x}",
            "    HASH = HASH ^ (HASH >> 32)",
        ]
    lines += [
        "    HASH = HASH ^ (HASH >> 29)",
        f"    HASH = HASH * {_MULTIPLY_2:#x}",
        "    HASH = HASH ^ (HASH >> 32)",
        "    tl.store(PARENT + ROWS, HASH.to(tl.int64, bitcast=True), mask=LIVE)",
    ]
    return lines


def canonical_kernel(source: str, words: int, tables: dict[tuple[int, ...], int]) -> str | None:
    """``canonical``'s Triton source (rows of ``W`` in, their representatives to ``OUT`` and the
    representatives' fingerprints to ``PARENT``), or None when the generated code has no
    ``canonical`` (no symmetry declared or asked for)."""
    module = ast.parse(source)
    function = next(
        (node for node in module.body if isinstance(node, ast.FunctionDef) and node.name == "canonical"), None
    )
    if function is None:
        return None
    spelling = _Spelling(tables, set(range(words)))
    body: list[str] = [f"    BEST_{word} = W_{word}" for word in range(words)]
    images: dict[str, int] = {}
    for statement in function.body:
        if isinstance(statement, ast.Delete):
            continue
        if isinstance(statement, ast.Return):
            body += [f"    tl.store(OUT + {word} * CAPACITY + ROWS, BEST_{word}, mask=LIVE)" for word in range(words)]
            body += _fingerprint_lines(words)
            continue
        if not (isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Name)):
            raise _fail(ast.unparse(statement)[:80])
        name, value = statement.targets[0].id, statement.value
        if name == "N":
            continue
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "_stack":
            parts = value.args[0]
            if not isinstance(parts, ast.List) or len(parts.elts) != words:
                raise _fail(ast.unparse(value)[:80])
            images[name] = len(images)
            body += [f"    {name}_{word} = ({_spelled(part, spelling)}) + ZERO" for word, part in enumerate(parts.elts)]
        elif name == "best" and isinstance(value, ast.Name) and value.id == "W":
            continue  # BEST_* start as the state's words
        elif name == "best" and isinstance(value, ast.Call):
            image = value.args[1]
            if not (isinstance(image, ast.Name) and image.id in images):
                raise _fail(ast.unparse(value)[:80])
            body += ["    LESS = ROWS < 0", "    EQUAL = ROWS >= 0"]
            for word in range(words):
                body += [
                    f"    LESS = LESS | (EQUAL & ({image.id}_{word} < BEST_{word}))",
                    f"    EQUAL = EQUAL & ({image.id}_{word} == BEST_{word})",
                ]
            body += [f"    BEST_{word} = tl.where(LESS, {image.id}_{word}, BEST_{word})" for word in range(words)]
        else:
            body.append(f"    {name} = {_spelled(value, spelling)}")
    return "\n".join(_header("canonical", words, spelling) + body)


__all__ = ["canonical_kernel"]
