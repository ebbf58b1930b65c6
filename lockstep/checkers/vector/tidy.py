"""Tidying generated straight-line code: dead assignments dropped, temporaries freed after use.

The kernels' generated functions are straight-line code with ``if`` blocks and unique temporary
names (``t<n>``), so one backward pass finds what nothing reads, and the last statement that
reads a temporary is where it can be freed: a frontier-sized array then lives only as long as it
is needed, which bounds the memory of a chunk and lets the allocator reuse it.
"""

from __future__ import annotations

import re

_ASSIGNED = re.compile(r"^\s*(t\d+) = (.*)$")
_TEMPORARY = re.compile(r"\bt\d+\b")


def tidy(source: str) -> str:
    """Drop the assignments to temporaries that nothing reads (straight-line code, so one backward
    pass decides): a value decoded or computed only to be compared away costs nothing. Then free
    each temporary after its last use, so a frontier-sized array lives only as long as it is needed."""
    kept: list[str] = []
    used: set[str] = set()
    for line in reversed(source.splitlines()):
        match = _ASSIGNED.match(line)
        if match is not None and match.group(1) not in used:
            continue
        used.update(_TEMPORARY.findall(line if match is None else match.group(2)))
        kept.append(line)
    kept.reverse()
    return "\n".join(_free_temporaries(kept)) + "\n"


def _free_temporaries(lines: list[str]) -> list[str]:
    """Insert ``del`` after the statement (a line, or an ``if`` block with its body) that last reads
    each temporary assigned at that statement's level; blocks are handled the same way inside."""
    result: list[str] = []
    position = 0
    while position < len(lines):
        line = lines[position]
        if not line.startswith("def "):
            result.append(line)
            position += 1
            continue
        end = position + 1
        while end < len(lines) and (lines[end].startswith(" ") or not lines[end].strip()):
            end += 1
        result.append(line)
        result.extend(_free_in_block(lines[position + 1 : end], "    "))
        position = end
    return result


def _free_in_block(lines: list[str], indent: str) -> list[str]:
    statements: list[list[str]] = []
    for line in lines:
        if line.startswith(indent) and not line.startswith(indent + " "):
            statements.append([line])
        elif statements:
            statements[-1].append(line)
    last: dict[str, int] = {}
    for index, statement in enumerate(statements):
        for name in _TEMPORARY.findall("\n".join(statement)):
            last[name] = index
    defined = {match.group(1) for statement in statements if (match := _ASSIGNED.match(statement[0])) is not None}
    dying: dict[int, list[str]] = {}
    for name in defined:
        if name in last:
            dying.setdefault(last[name], []).append(name)
    result: list[str] = []
    for index, statement in enumerate(statements):
        head, body = statement[0], statement[1:]
        result.append(head)
        if body:
            result.extend(_free_in_block(body, indent + "    ") if head.rstrip().endswith(":") else body)
        if head.strip().startswith("return "):
            continue
        dead = sorted(dying.get(index, ()))
        if dead:
            result.append(f"{indent}del {', '.join(dead)}")
    return result


__all__ = ["tidy"]
