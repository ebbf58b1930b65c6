"""Symmetry for ``bfs-vec``'s native loops: the generated ``canonical`` spelled as one C loop.

``canonical(W)`` (``images.py``) builds, for every permutation of the symmetric ranks, each state's
image by bit moves and table lookups, and keeps the least image (words compared in order, as signed
64-bit values: ``Backend.less``). As numpy operations over a chunk that is a few hundred passes
through memory; here one loop over rows builds each row's images in registers and keeps the least,
with the same expressions in ``native``'s C spelling (``fused_symmetry`` does the same for Triton).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from lockstep.checkers.vector.values import Unsupported

if TYPE_CHECKING:
    from lockstep.checkers.vector.native import _Spelling


def canonical_source(source: str, words: int, spelling: _Spelling) -> list[str]:
    """C lines of ``canonical(W, STRIDE, N, OUT)`` (rows of ``W`` in, their representatives to
    ``OUT``, words x N), or none when the generated code has no ``canonical``. ``spelling`` is
    ``native._Spelling`` (its tables are the library's)."""
    module = ast.parse(source)
    function = next(
        (node for node in module.body if isinstance(node, ast.FunctionDef) and node.name == "canonical"), None
    )
    if function is None:
        return []
    indent = "        "
    body = [
        "void canonical(const i64 *W, i64 STRIDE, i64 N, i64 *OUT) {",
        "    for (i64 ROW = 0; ROW < N; ROW++) {",
        *(f"{indent}i64 W_{word} = W[{word} * STRIDE + ROW];" for word in range(words)),
        *(f"{indent}i64 BEST_{word} = W_{word};" for word in range(words)),
    ]
    images: set[str] = set()
    for statement in function.body:
        if isinstance(statement, ast.Delete):
            continue
        if isinstance(statement, ast.Return):
            body += [f"{indent}OUT[{word} * N + ROW] = BEST_{word};" for word in range(words)]
            continue
        if not (isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Name)):
            raise Unsupported(f"native symmetry: {ast.unparse(statement)[:80]}")
        name, value = statement.targets[0].id, statement.value
        if name == "N" or (name == "best" and isinstance(value, ast.Name) and value.id == "W"):
            continue  # BEST_* start as the state's words
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "_stack":
            parts = value.args[0]
            if not isinstance(parts, ast.List) or len(parts.elts) != words:
                raise Unsupported(f"native symmetry: {ast.unparse(value)[:80]}")
            images.add(name)
            body += [
                f"{indent}i64 {name}_{word} = {spelling.expression(part)};" for word, part in enumerate(parts.elts)
            ]
        elif name == "best" and isinstance(value, ast.Call) and len(value.args) == 3:
            image = value.args[1]
            if not (isinstance(image, ast.Name) and image.id in images):
                raise Unsupported(f"native symmetry: {ast.unparse(value)[:80]}")
            body.append(f"{indent}{{ int LESS = 0, EQUAL = 1;")
            for word in range(words):
                body.append(
                    f"{indent}  LESS |= EQUAL & ({image.id}_{word} < BEST_{word}); "
                    f"EQUAL &= ({image.id}_{word} == BEST_{word});"
                )
            body.append(
                f"{indent}  if (LESS) {{ {' '.join(f'BEST_{word} = {image.id}_{word};' for word in range(words))} }} }}"
            )
        else:
            body.append(indent + spelling.assignment(statement))
    return [*body, "    }", "}", ""]


__all__ = ["canonical_source"]
