"""Fused GPU successor kernels: the generated ``expand`` recompiled to Triton, one kernel per action.

The array kernels of ``kernels`` run one array operation at a time; on a GPU each costs a launch
and a Python dispatch, so a level costs the same whatever its size (``bench/profile_gpu.py``;
docs/performance.md has the figures). Here the same generated code is read back (``ast``) and rewritten as
Triton kernels in which one program handles a block of frontier rows: it decodes their words,
evaluates each argument tuple's guard and successor for every row of the block (densely: rows where
the guard is false compute values that are thrown away), and appends the successors of guarded
rows, with their parent row and tuple id, to one output buffer at positions reserved by an atomic
counter. Whole-chunk work is then a handful of launches and one read-back.

Nothing here decides anything the array kernels do not: the expressions are the generated ones,
only their spelling changes (``_where`` -> ``tl.where``, ``W[i]`` -> a loaded word, ``//`` and
``%`` -> floor-division helpers with the array semantics). The order in which programs append is
not deterministic; the search orders successors by discovery key, as it does for the array
kernels, so results are identical. A chunk in which any row steps out of a sort or fails to
evaluate is flagged and handed back to the array kernels, which report it exactly.

On CUDA they are compiled once per model (Triton's cache) and used by default (the ``kernels`` option
``arrays`` turns them off). ``kernels`` ``triton`` with ``TRITON_INTERPRET=1`` runs them on CPU
tensors in Triton's interpreter, which is how the tests check them against ``bfs-vec``.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lockstep.checkers.vector.values import Unsupported

_HELPERS = """
@triton.jit
def _floor_divide(left, right):
    safe = tl.where(right == 0, 1, right)
    quotient = left // safe
    fix = (left % safe != 0) & ((left < 0) != (safe < 0))
    return tl.where(fix, quotient - 1, quotient)


@triton.jit
def _modulo(left, right):
    safe = tl.where(right == 0, 1, right)
    rest = left % safe
    fix = (rest != 0) & ((rest < 0) != (safe < 0))
    return tl.where(fix, rest + safe, rest)
"""

_RENAMED = {"_where": "tl.where", "_minimum": "tl.minimum", "_maximum": "tl.maximum"}

# A tuple's successor code runs under ``if`` some row of the block takes it: a block where no row
# does skips its arithmetic, stores and atomics (guards are sparse: a few of dozens of tuples per state)
SKIP_IDLE_TUPLES = True


@dataclass
class _Block:
    """One argument tuple of the generated ``expand``: its guard and successor code."""

    tuple_id: int
    guard: ast.expr
    lines: list[ast.Assign] = field(default_factory=list)
    writes: dict[int, ast.expr] = field(default_factory=dict)
    error: ast.expr | None = None
    out_of_bounds: ast.expr | None = None


@dataclass
class _Parsed:
    outer: list[ast.Assign]
    guards: list[ast.expr]
    blocks: list[_Block]
    checks: list[ast.expr]  # the guard-evaluation error masks (over every row)
    enabled: ast.expr


def _number(node: ast.AST) -> int:
    """The value of an integer constant of the generated code."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_number(node.operand)
    if not isinstance(node, ast.Constant) or not isinstance(node.value, int):
        raise _fail(ast.unparse(node)[:80])
    return int(node.value)


def _fail(what: str) -> Unsupported:
    return Unsupported(f"fused kernels: unexpected generated code ({what})")


def _call(node: ast.AST, name: str) -> ast.Call | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name:
        return node
    return None


def _append(node: ast.stmt, target: str) -> tuple[ast.expr, ...] | None:
    """The tuple appended by ``target.append((...))``, or None."""
    if not isinstance(node, ast.Expr) or not isinstance(node.value, ast.Call):
        return None
    function = node.value.func
    if (
        isinstance(function, ast.Attribute)
        and function.attr == "append"
        and isinstance(function.value, ast.Name)
        and function.value.id == target
    ):
        argument = node.value.args[0]
        if isinstance(argument, ast.Tuple):
            return tuple(argument.elts)
    return None


def parse(source: str) -> _Parsed:
    """Read the generated ``expand`` back into guard lines, guards and per-tuple blocks."""
    module = ast.parse(source)
    function = next((node for node in module.body if isinstance(node, ast.FunctionDef) and node.name == "expand"), None)
    if function is None:
        raise _fail("no expand function")
    outer: list[ast.Assign] = []
    guards: list[ast.expr] = []
    blocks: list[_Block] = []
    checks: list[ast.expr] = []
    enabled: ast.expr | None = None
    for statement in function.body:
        if isinstance(statement, ast.Delete):
            continue
        if isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Name):
            name = statement.targets[0].id
            counts = _call(statement.value, "_counts")
            if name == "counts" and counts is not None and isinstance(counts.args[0], ast.Tuple):
                guards = list(counts.args[0].elts)
            elif name not in ("N", "blocks", "errors"):
                outer.append(statement)
            continue
        appended = _append(statement, "errors")
        if appended is not None:
            checks.append(appended[1])
            continue
        if isinstance(statement, ast.If):
            blocks.append(_block(statement))
            continue
        if isinstance(statement, ast.Return) and isinstance(statement.value, ast.Tuple):
            enabled = statement.value.elts[1]
            continue
        raise _fail(ast.unparse(statement)[:80])
    if enabled is None:
        raise _fail("no return")
    return _Parsed(outer, guards, blocks, checks, enabled)


def _block(statement: ast.If) -> _Block:
    test = statement.test
    if not (isinstance(test, ast.Subscript) and isinstance(test.slice, ast.Constant)):
        raise _fail(ast.unparse(test))
    tuple_id = _number(test.slice)
    first = statement.body[0]
    rows = _call(first.value, "_rows") if isinstance(first, ast.Assign) else None
    if rows is None:
        raise _fail(f"tuple {tuple_id} without its rows")
    block = _Block(tuple_id, rows.args[0])
    parent = f"P{tuple_id}"
    for line in statement.body[2:]:
        if isinstance(line, ast.Delete):
            continue
        if isinstance(line, ast.Assign):
            target = line.targets[0]
            if isinstance(target, ast.Name):
                block.lines.append(line)
                continue
            if (
                isinstance(target, ast.Subscript)
                and isinstance(target.value, ast.Name)
                and target.value.id == parent
                and isinstance(target.slice, ast.Constant)
            ):
                block.writes[_number(target.slice)] = line.value
                continue
        error = _append(line, "errors")
        if error is not None:
            block.error = error[1]
            continue
        appended = _append(line, "blocks")
        if appended is not None:
            oob = appended[3]
            if isinstance(oob, ast.Compare):  # ``(r >= 0)``: every successor leaves its sort
                block.out_of_bounds = ast.Constant(True)
            elif not (isinstance(oob, ast.Constant) and oob.value is None):
                block.out_of_bounds = oob
            continue
        raise _fail(ast.unparse(line)[:80])
    return block


class _Spelling(ast.NodeTransformer):
    """Array-kernel spelling to Triton spelling; collects lookup tables and words read."""

    def __init__(self, tables: dict[tuple[int, ...], int], words: set[int], parent: str | None = None) -> None:
        self.tables = tables
        self.words = words
        self.parent = parent

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        if (
            isinstance(node.value, ast.Name)
            and node.value.id in ("W", self.parent)
            and isinstance(node.slice, ast.Constant)
        ):
            word = _number(node.slice)
            self.words.add(word)
            return ast.Name(f"W_{word}", ast.Load())
        return self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        helper = {ast.FloorDiv: "_floor_divide", ast.Mod: "_modulo"}.get(type(node.op))
        if helper is None:
            return node
        return ast.Call(ast.Name(helper, ast.Load()), [node.left, node.right], [])

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.func, ast.Name):
            raise _fail(ast.unparse(node)[:80])
        name = node.func.id
        if name == "_where" and all(_integer(argument) for argument in node.args[1:]):
            node.args[1] = ast.parse(f"(ZERO + {ast.unparse(node.args[1])})", mode="eval").body
        if name in _RENAMED:
            module, attribute = _RENAMED[name].split(".")
            node.func = ast.Attribute(ast.Name(module, ast.Load()), attribute, ast.Load())
            return node
        if name == "_int":
            argument = node.args[0]
            if isinstance(argument, ast.Constant):
                return ast.Constant(_number(argument))
            return ast.parse(f"({ast.unparse(argument)}).to(tl.int64)", mode="eval").body
        if name == "_lookup" and isinstance(node.args[0], ast.Tuple):
            table = tuple(_number(element) for element in node.args[0].elts)
            offset = self.tables.setdefault(table, sum(len(known) for known in self.tables))
            index = f"tl.minimum(tl.maximum({ast.unparse(node.args[1])}, 0), {len(table) - 1})"
            return ast.parse(f"tl.load(TABLES + {offset} + {index})", mode="eval").body
        raise _fail(f"call {name}")


def _uses(block: _Block) -> set[str]:
    """The names a tuple's code reads."""
    used: set[str] = _names(block.guard)
    for line in block.lines:
        used |= _names(line.value)
    for value in block.writes.values():
        used |= _names(value)
    for mask in (block.error, block.out_of_bounds):
        if mask is not None:
            used |= _names(mask)
    return used


def _local_blocks(blocks: Sequence[_Block]) -> set[int]:
    """The tuple ids whose lines define no name that another tuple's code reads (their code can
    then sit under a branch of its own)."""
    uses = {block.tuple_id: _uses(block) for block in blocks}
    readers: dict[str, int] = {}
    for used in uses.values():
        for name in used:
            readers[name] = readers.get(name, 0) + 1
    local = set()
    for block in blocks:
        defined = {line.targets[0].id for line in block.lines}  # type: ignore[attr-defined]
        if all(readers.get(name, 0) - (name in uses[block.tuple_id]) == 0 for name in defined):
            local.add(block.tuple_id)
    return local


def _integer(node: ast.AST) -> bool:
    """An integer (not boolean) constant: Triton would make it int32, and a ``where`` of two of them too."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool)


def _names(node: ast.AST) -> set[str]:
    return {item.id for item in ast.walk(node) if isinstance(item, ast.Name)}


def _slice(definitions: Sequence[ast.Assign], wanted: set[str]) -> list[ast.Assign]:
    """The definitions (in order) that the names in ``wanted`` depend on."""
    chosen: list[ast.Assign] = []
    needed = set(wanted)
    for definition in reversed(definitions):
        name = definition.targets[0].id  # type: ignore[attr-defined]
        if name in needed:
            chosen.append(definition)
            needed |= _names(definition.value)
    return list(reversed(chosen))


def _mask(node: ast.expr | None) -> str:
    if node is None or (isinstance(node, ast.Constant) and node.value is False):
        return "(ROWS < 0)"
    if isinstance(node, ast.Constant) and node.value is True:
        return "LIVE"
    return f"(({ast.unparse(node)}) & LIVE)"  # names only: guards and masks are temporaries


def _header(name: str, words: int, spelling: _Spelling) -> list[str]:
    return [
        '@triton.jit(do_not_specialize=["N", "STRIDE", "CAPACITY"])',  # one compilation, whatever the sizes
        f"def {name}(W, N, STRIDE, OUT, PARENT, VIA, CONTROL, ENABLED, TABLES, CAPACITY, BLOCK: tl.constexpr):",
        "    ROWS = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
        "    LIVE = ROWS < N",
        "    ZERO = ROWS.to(tl.int64) * 0",
        *(
            f"    W_{word} = tl.load(W + {word} * STRIDE + ROWS, mask=LIVE, other=0)"
            for word in sorted(spelling.words)
            if word < words
        ),
    ]


def _statements(lines: Sequence[ast.Assign], spelling: _Spelling) -> list[str]:
    return [f"    {line.targets[0].id} = {_spelled(line.value, spelling)}" for line in lines]  # type: ignore[attr-defined]


def _spelled(node: ast.expr, spelling: _Spelling) -> str:
    """Triton spelling of a generated expression (the parsed tree is left as it is: the spelling
    rewrites a fresh parse of it, cheaper than a deep copy)."""
    return ast.unparse(spelling.visit(ast.parse(ast.unparse(node), mode="eval").body))


@dataclass
class FusedSource:
    """The Triton source of one machine's fused kernels and what their launch needs."""

    source: str
    kernels: list[str]  # the successor kernels' names; ``enabled`` first
    tables: list[int]
    tuples: int
    words: int
    values: list[Any] = field(default_factory=list)  # per property: a constant, or "row" (from ``predicates``)
    canonical: bool = False  # whether there is a ``canonical`` kernel (symmetry)


def fused_source(
    expand_source: str, words: int, groups: Sequence[Sequence[int]], predicates: str | None = None
) -> FusedSource:
    """Triton kernels for ``expand``: ``enabled`` (which rows have an enabled tuple; errors of the
    guards) and one kernel per group of tuple ids (their successors); with the generated source of
    ``predicates``, a ``predicates`` kernel too, and ``canonical`` where that source has one."""
    parsed = parse(expand_source)
    if len(parsed.guards) != len(parsed.blocks) + sum(
        1 for guard in parsed.guards if isinstance(guard, ast.Constant) and guard.value is False
    ):
        raise _fail("guards and blocks do not match")
    tables: dict[tuple[int, ...], int] = {}
    by_tuple = {block.tuple_id: block for block in parsed.blocks}
    local = _local_blocks(parsed.blocks)
    sources: list[str] = []
    names: list[str] = []
    # ``enabled``: the disjunction of the guards and whether any guard fails to evaluate
    spelling = _Spelling(tables, set())
    checks = [_mask(check) for check in parsed.checks]
    wanted = _names(parsed.enabled) | set().union(*(_names(check) for check in parsed.checks))
    body = _statements(_slice(parsed.outer, wanted), spelling)
    lines = _header("enabled", words, spelling) + body
    lines.append(f"    tl.store(ENABLED + ROWS, ({_mask(parsed.enabled)}).to(tl.int8), mask=LIVE)")
    if checks:
        lines.append(f"    BAD = {' | '.join(checks)}")
        lines.append("    tl.atomic_max(CONTROL + 1, tl.max(BAD.to(tl.int64), axis=0))")
    sources.append("\n".join(lines))
    names.append("enabled")
    for group_number, group in enumerate(groups):
        members = [by_tuple[tuple_id] for tuple_id in group if tuple_id in by_tuple]
        if not members:
            continue
        spelling = _Spelling(tables, set())
        wanted = set().union(*(_names(member.guard) for member in members))
        for member in members:
            wanted |= set().union(*(_names(line.value) for line in member.lines))
        body = _statements(_slice(parsed.outer, wanted), spelling)
        for member in members:
            spelling.parent = f"P{member.tuple_id}"
            body.append(f"    # tuple {member.tuple_id}")
            body.append(f"    GUARD = {_mask(member.guard)}")
            tuple_body = _statements(member.lines, spelling)
            written = {word: _spelled(value, spelling) for word, value in member.writes.items()}
            for word in range(words):
                spelling.words.add(word)
                tuple_body.append(f"    NEW_{word} = ({written.get(word, f'W_{word}')}).to(tl.int64)")
            bad = [_mask(member.error), _mask(member.out_of_bounds)]
            tuple_body += [
                "    TAKEN = GUARD.to(tl.int32)",
                "    COUNT = tl.sum(TAKEN, axis=0)",
                "    BASE = tl.atomic_add(CONTROL + 0, COUNT.to(tl.int64))",
                f"    tl.atomic_add(CONTROL + {2 + member.tuple_id}, COUNT.to(tl.int64))",
                "    AT = BASE + tl.cumsum(TAKEN, axis=0).to(tl.int64) - 1",
                "    KEEP = GUARD & (AT < CAPACITY)",
                *(f"    tl.store(OUT + {word} * CAPACITY + AT, NEW_{word}, mask=KEEP)" for word in range(words)),
                "    tl.store(PARENT + AT, ROWS.to(tl.int64), mask=KEEP)",
                f"    tl.store(VIA + AT, tl.full([BLOCK], {member.tuple_id}, tl.int64), mask=KEEP)",
                f"    BAD = GUARD & ({' | '.join(bad)})",
                "    tl.atomic_max(CONTROL + 1, tl.max(BAD.to(tl.int64), axis=0))",
            ]
            if SKIP_IDLE_TUPLES and member.tuple_id in local:
                body.append("    if tl.max(GUARD.to(tl.int32), axis=0) > 0:")
                body += ["    " + line for line in tuple_body]
            else:
                body += tuple_body
        name = f"successors_{group_number}"
        sources.append("\n".join(_header(name, words, spelling) + body))
        names.append(name)
    values: list[bool | None] = []
    canonical = False
    if predicates is not None:
        source, values = _predicates_kernel(predicates, words, tables)
        sources.append(source)
        from lockstep.checkers.vector.fused_symmetry import canonical_kernel  # noqa: PLC0415 - it imports this module

        symmetry = canonical_kernel(predicates, words, tables)
        if symmetry is not None:
            sources.append(symmetry)
            canonical = True
    table_values = [value for table in tables for value in table]
    header = "import triton\nimport triton.language as tl\n" + _HELPERS
    text = header + "\n\n" + "\n\n\n".join(sources) + "\n"
    return FusedSource(text, names, table_values, len(parsed.guards), words, values, canonical)


def _predicates_kernel(source: str, words: int, tables: dict[tuple[int, ...], int]) -> tuple[str, list[Any]]:
    """``predicates``: each property's value per row into ``OUT`` (one int8 row per property whose
    value is not a constant); which values are constants (True, False, None) or rows ("row")."""
    module = ast.parse(source)
    function = next(
        (node for node in module.body if isinstance(node, ast.FunctionDef) and node.name == "predicates"), None
    )
    if function is None:
        raise _fail("no predicates function")
    definitions = [line for line in function.body if isinstance(line, ast.Assign)]
    answer = function.body[-1]
    if not (
        isinstance(answer, ast.Return)
        and isinstance(answer.value, ast.Tuple)
        and isinstance(answer.value.elts[0], ast.Tuple)
    ):
        raise _fail("predicates without their return")
    results, error = answer.value.elts[0].elts, answer.value.elts[1]
    spelling = _Spelling(tables, set())
    wanted = _names(error).union(*(_names(result) for result in results))
    body = _statements(_slice(definitions, wanted), spelling)
    values: list[Any] = []
    for position, result in enumerate(results):
        if isinstance(result, ast.Constant):
            values.append(result.value)
            continue
        values.append("row")
        body.append(f"    tl.store(OUT + {position} * CAPACITY + ROWS, ({ast.unparse(result)}).to(tl.int8), mask=LIVE)")
    body.append(f"    tl.atomic_max(CONTROL + 1, tl.max(({_mask(error)}).to(tl.int64), axis=0))")
    return "\n".join(_header("predicates", words, spelling) + body), values


__all__ = ["FusedSource", "fused_source", "parse"]
