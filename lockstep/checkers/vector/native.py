"""Native successor kernels for ``bfs-vec``: the generated ``expand`` recompiled to C, one loop over rows.

The array kernels of ``kernels`` evaluate every guard over the whole frontier and then gather,
decode and write each enabled tuple's successors one numpy operation at a time; on one CPU core
most of that time is memory traffic between temporaries. Here the same generated code is read back
(``fused.parse``) and spelled as one C function whose loop handles a frontier row at a time: it
loads the row's words, evaluates the guards, and for each enabled tuple computes the successor's
words and fingerprint and appends them, with the row and tuple id, to the output arrays. Successors
come out in discovery order (row, then tuple id), which is the order the search sorts them into.

Nothing here decides anything the array kernels do not: the expressions are the generated ones,
only their spelling changes (``_where`` -> ``?:``, ``//`` and ``%`` -> floor-division helpers with
numpy's semantics, booleans as C ints, signed overflow wrapping as numpy's does: ``-fwrapv``). A
chunk in which any row steps out of a sort or fails to evaluate is flagged and handed back to the
array kernels, which report it exactly (as with the GPU's fused kernels).

The C source is compiled by the system's C compiler (``$CC``, else ``cc``/``gcc``; SPIN compiles
its verifiers the same way) into a shared library kept as a signed entry of ``lockstep.cache``
(kind ``native``, named by a hash of the source and the command): a later run of the same model
verifies it and loads it at once (a private copy of the verified bytes, so the file that is
loaded is the one that was verified); one that fails to verify or load is removed and compiled
again. Where it is not cached, compiling costs more than a small model's whole search
(docs/performance.md), so it starts in the background once a search has stored
``THRESHOLD`` states and the array kernels go on until the library is there. The ``kernels`` option
(``engines.VectorOptions``) ``arrays`` turns the native kernels off, ``c`` compiles them before the
first level (what the tests use).
No compiler, or a compiler that fails, leaves the array kernels in charge.

Under an explicit memory cap (``--max-memory``) the compiler's memory counts: it runs in the
foreground (the search waits, so the two never add up) with its address space limited to what the
search leaves under the cap (``ulimit -v``); a compile that needs more fails, and the array kernels
go on.
"""

from __future__ import annotations

import ast
import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from lockstep.cache import Entry, Store, root
from lockstep.checkers.limits import resident_memory_bytes
from lockstep.checkers.vector import native_sets, native_symmetry
from lockstep.checkers.vector.backend import _MULTIPLY_1, _MULTIPLY_2, _SEED
from lockstep.checkers.vector.fused import _local_blocks, _number, parse
from lockstep.checkers.vector.fused_launch import Expansion
from lockstep.checkers.vector.kernels import Kernels
from lockstep.checkers.vector.native_sets import SETS_SOURCE, NativeSets
from lockstep.checkers.vector.values import Unsupported

THRESHOLD = 1 << 15  # stored states after which an uncached library is compiled (in the background)
MINIMUM_COMPILE_KILOBYTES = 64 * 1024  # under a memory cap, less room than this: no compile
_FLAGS = ("-O1", "-fwrapv", "-shared", "-fPIC")

_HEADER = f"""#include <stdint.h>
typedef int64_t i64;
typedef uint64_t u64;
static inline i64 floor_divide(i64 a, i64 b) {{
    if (b == 0) return 0;
    i64 q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}}
static inline i64 modulo(i64 a, i64 b) {{
    if (b == 0) return 0;
    i64 r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}}
static inline i64 shift_right(i64 a, i64 b) {{ return b >= 64 ? (a < 0 ? -1 : 0) : b < 0 ? 0 : a >> b; }}
static inline i64 shift_left(i64 a, i64 b) {{ return (b >= 64 || b < 0) ? 0 : (i64)((u64)a << b); }}
static inline i64 minimum(i64 a, i64 b) {{ return a < b ? a : b; }}
static inline i64 maximum(i64 a, i64 b) {{ return a > b ? a : b; }}
static inline u64 mix(u64 h, i64 word) {{ h ^= (u64)word; h *= {_MULTIPLY_1}ULL; return h ^ (h >> 32); }}
static inline i64 finish(u64 h) {{ h ^= h >> 29; h *= {_MULTIPLY_2}ULL; return (i64)(h ^ (h >> 32)); }}
"""

_COMPARISONS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_OPERATORS = {ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}


def _literal(value: int) -> str:
    """A C literal of a signed 64-bit value (the least one has no literal of its own)."""
    return f"((i64){value}LL)" if value > -(1 << 63) else "((i64)(-9223372036854775807LL - 1))"


def _fail(what: str) -> Unsupported:
    return Unsupported(f"native kernels: unexpected generated code ({what})")


class _Spelling:
    """C spelling of the generated expressions; tracks which names hold booleans (numpy's ``~`` on a
    boolean array is a logical not, C's ``~`` on an int is not) and collects lookup tables."""

    def __init__(self) -> None:
        self.tables: dict[tuple[int, ...], int] = {}
        self.boolean: dict[str, bool] = {}

    def is_boolean(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, bool)
        if isinstance(node, ast.Name):
            return self.boolean.get(node.id, False)
        if isinstance(node, ast.Compare):
            return True
        if isinstance(node, ast.BinOp) and type(node.op) in (ast.BitAnd, ast.BitOr, ast.BitXor):
            return self.is_boolean(node.left) and self.is_boolean(node.right)
        if isinstance(node, ast.UnaryOp):
            return isinstance(node.op, ast.Not) or (isinstance(node.op, ast.Invert) and self.is_boolean(node.operand))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_where":
            return self.is_boolean(node.args[1]) and self.is_boolean(node.args[2])
        return False

    def expression(self, node: ast.expr) -> str:  # noqa: PLR0911 - one case per node kind
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool):
                return "1" if node.value else "0"
            if isinstance(node.value, int):
                return _literal(node.value)
        elif isinstance(node, ast.Name):
            return node.id
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            return f"W_{_number(node.slice)}"  # the frontier's word, or the parent's (the same row here)
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARISONS:
            comparison = _COMPARISONS[type(node.ops[0])]
            return f"({self.expression(node.left)} {comparison} {self.expression(node.comparators[0])})"
        elif isinstance(node, ast.BinOp):
            return self._binary(node)
        elif isinstance(node, ast.UnaryOp):
            operand = self.expression(node.operand)
            if isinstance(node.op, ast.Not) or (isinstance(node.op, ast.Invert) and self.is_boolean(node.operand)):
                return f"(!{operand})"
            if isinstance(node.op, ast.Invert):
                return f"(~{operand})"
            if isinstance(node.op, ast.USub):
                return f"(-{operand})"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return self._call(node.func.id, node.args)
        raise _fail(ast.unparse(node)[:80])

    def _binary(self, node: ast.BinOp) -> str:
        left, right = self.expression(node.left), self.expression(node.right)
        kind = type(node.op)
        if kind is ast.FloorDiv:
            return f"floor_divide({left}, {right})"
        if kind is ast.Mod:
            return f"modulo({left}, {right})"
        if kind in (ast.RShift, ast.LShift):
            amount = node.right
            constant = isinstance(amount, ast.Constant) and isinstance(amount.value, int) and 0 <= amount.value < 64
            if kind is ast.RShift:
                return f"({left} >> {right})" if constant else f"shift_right({left}, {right})"
            return f"((i64)((u64)({left}) << {right}))" if constant else f"shift_left({left}, {right})"
        if kind in _OPERATORS:
            return f"({left} {_OPERATORS[kind]} {right})"
        raise _fail(ast.unparse(node)[:80])

    def _call(self, name: str, arguments: list[ast.expr]) -> str:
        spelled = [self.expression(argument) for argument in arguments[1:]] if name == "_lookup" else []
        if name == "_where":
            condition, then, otherwise = (self.expression(argument) for argument in arguments)
            return f"({condition} ? {then} : {otherwise})"
        if name == "_int":
            return f"((i64){self.expression(arguments[0])})"
        if name in ("_minimum", "_maximum"):
            return f"{name[1:]}({self.expression(arguments[0])}, {self.expression(arguments[1])})"
        if name == "_lookup" and isinstance(arguments[0], ast.Tuple):
            table = tuple(_number(element) for element in arguments[0].elts)
            offset = self.tables.setdefault(table, sum(len(known) for known in self.tables))
            return f"TABLES[{offset} + minimum(maximum({spelled[0]}, 0), {len(table) - 1})]"
        raise _fail(f"call {name}")

    def assignment(self, line: ast.Assign) -> str:
        name = line.targets[0].id  # type: ignore[attr-defined]
        boolean = self.boolean[name] = self.is_boolean(line.value)
        return f"{'int' if boolean else 'i64'} {name} = {self.expression(line.value)};"


def native_source(expand_source: str, words: int) -> str:
    """C for ``expand``, ``predicates`` and the set loops (lookup tables as static arrays in it): ``successors(W,
    STRIDE, N, OUT, FINGERPRINTS, PARENT, VIA, COUNTS, ENABLED, CAPACITY, BAD)`` appends every
    enabled tuple's successor of rows 0..N-1 in discovery order, returns how many there are (only
    the first CAPACITY are written) and sets ``*BAD`` when a row fails to evaluate or a successor
    leaves its sort."""
    parsed = parse(expand_source)
    spelling = _Spelling()
    local = _local_blocks(parsed.blocks)
    by_tuple = {block.tuple_id: block for block in parsed.blocks}
    indent = "        "
    lines = [
        _HEADER,
        "i64 successors(const i64 *W, i64 STRIDE, i64 N, i64 *OUT, i64 *FINGERPRINTS, i64 *PARENT, i64 *VIA,",
        "               i64 *COUNTS, int8_t *ENABLED, i64 CAPACITY, i64 *BAD_OUT) {",
        "    i64 AT = 0;",
        "    int BAD = 0;",
        "    for (i64 ROW = 0; ROW < N; ROW++) {",
        *(f"{indent}i64 W_{word} = W[{word} * STRIDE + ROW];" for word in range(words)),
        *(indent + spelling.assignment(line) for line in parsed.outer),
        f"{indent}ENABLED[ROW] = (int8_t)({spelling.expression(parsed.enabled)});",
        *(f"{indent}BAD |= {spelling.expression(check)};" for check in parsed.checks),
    ]
    for tuple_id, guard in enumerate(parsed.guards):
        if isinstance(guard, ast.Constant) and guard.value is False:
            continue
        block = by_tuple.get(tuple_id)
        if block is None:
            raise _fail(f"tuple {tuple_id} without its block")
        body = [spelling.assignment(line) for line in block.lines]
        if tuple_id not in local:  # a name another tuple reads: computed for every row, as the arrays do
            lines += [indent + line for line in body]
            body = []
        inner = indent + "    "
        written = [
            spelling.expression(block.writes[word]) if word in block.writes else f"W_{word}" for word in range(words)
        ]
        lines += [
            f"{indent}if ({spelling.expression(block.guard)}) {{",
            *(inner + line for line in body),
            *(f"{inner}i64 NEW_{word} = (i64)({value});" for word, value in enumerate(written)),
            f"{inner}if (AT < CAPACITY) {{",
            f"{inner}    u64 HASH = {_SEED}ULL;",
            *(
                f"{inner}    OUT[{word} * CAPACITY + AT] = NEW_{word}; HASH = mix(HASH, NEW_{word});"
                for word in range(words)
            ),
            f"{inner}    FINGERPRINTS[AT] = finish(HASH); PARENT[AT] = ROW; VIA[AT] = {tuple_id};",
            f"{inner}}}",
            f"{inner}AT++;",
            f"{inner}COUNTS[{tuple_id}]++;",
            *(
                f"{inner}BAD |= {spelling.expression(mask)};"
                for mask in (block.error, block.out_of_bounds)
                if mask is not None and not (isinstance(mask, ast.Constant) and mask.value is False)
            ),
            f"{indent}}}",
        ]
    lines += ["    }", "    *BAD_OUT = BAD;", "    return AT;", "}", ""]
    lines += _predicates(expand_source, words, spelling)
    lines += native_symmetry.canonical_source(expand_source, words, spelling)
    lines.append(SETS_SOURCE)
    tables = [value for table in spelling.tables for value in table] or [0]
    lines.insert(1, f"static const i64 TABLES[{len(tables)}] = {{{', '.join(_literal(value) for value in tables)}}};")
    return "\n".join(lines)


def _predicates(source: str, words: int, spelling: _Spelling) -> list[str]:
    """C for ``predicates``: ``int predicates(W, STRIDE, N, OUT)`` writes, for each property whose
    value is not a constant, one byte per row at ``OUT[property * N + row]`` and returns whether a row
    failed to evaluate; ``int kinds(int8_t *OUT)`` returns how many properties there are and, given
    room, which values are rows (3) or the constants False (0), True (1) and None (2)."""
    function = next(
        (node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef) and node.name == "predicates"),
        None,
    )
    answer = None if function is None else function.body[-1]
    if not (
        isinstance(answer, ast.Return)
        and isinstance(answer.value, ast.Tuple)
        and isinstance(answer.value.elts[0], ast.Tuple)
    ):
        raise _fail("predicates without their return")
    assert function is not None
    results, error = answer.value.elts[0].elts, answer.value.elts[1]
    kinds = [
        3 if not isinstance(result, ast.Constant) else 2 if result.value is None else int(bool(result.value))
        for result in results
    ]
    indent = "        "
    lines = [
        "int predicates(const i64 *W, i64 STRIDE, i64 N, int8_t *OUT) {",
        "    int BAD = 0;",
        "    for (i64 ROW = 0; ROW < N; ROW++) {",
        *(f"{indent}i64 W_{word} = W[{word} * STRIDE + ROW];" for word in range(words)),
        *(indent + spelling.assignment(line) for line in function.body if isinstance(line, ast.Assign)),
        *(
            f"{indent}OUT[{position} * N + ROW] = (int8_t)(({spelling.expression(result)}) != 0);"
            for position, (result, kind) in enumerate(zip(results, kinds))
            if kind == 3
        ),
        f"{indent}BAD |= {spelling.expression(error)};",
        "    }",
        "    return BAD;",
        "}",
        f"static const int8_t KINDS[{len(kinds) or 1}] = {{{', '.join(map(str, kinds)) or '0'}}};",
        f"int kinds(int8_t *OUT) {{ for (int i = 0; OUT && i < {len(kinds)}; i++) OUT[i] = KINDS[i];",
        f"                          return {len(kinds)}; }}",
        "",
    ]
    return lines


def compiler() -> str | None:
    """The C compiler to use: ``$CC``, else ``cc`` or ``gcc`` on the path; None when there is none."""
    configured = os.environ.get("CC")
    if configured:
        return shutil.which(configured)
    return shutil.which("cc") or shutil.which("gcc")


_OPENED: dict[Path, Any] = {}  # this process's loaded libraries, by their verified entry's file


def _opened(entry: Entry) -> Any:
    """The library of a verified entry, loaded from a private copy of the bytes that were verified
    (the entry's own file could be changed between the check and the load)."""
    if entry.path not in _OPENED:
        descriptor, copy = tempfile.mkstemp(prefix=".load-", suffix=".so", dir=entry.path.parent)
        try:
            with os.fdopen(descriptor, "wb") as file:
                file.write(entry.data)
            _OPENED[entry.path] = ctypes.CDLL(copy)
        finally:
            os.unlink(copy)
    return _OPENED[entry.path]


class NativeKernels:
    """One machine's compiled successor loop, loaded once its library exists."""

    def __init__(self, arrays: Kernels, command: str, eager: bool, memory_cap: int | None = None) -> None:
        self.arrays = arrays
        self.memory_cap = memory_cap  # an explicit cap: the compiler runs in the foreground, within what is left
        self.words = arrays.layout.words
        self.tuples = len(arrays.tuples)
        self.command = [command, *_FLAGS]
        # a change to this module, the set loops or symmetry's compiles every library again
        generator = b"".join(
            Path(module).read_bytes() for module in (__file__, native_sets.__file__, native_symmetry.__file__)
        )
        digest = hashlib.sha256(generator + repr((arrays.source, self.words, self.command)).encode()).hexdigest()
        self.store = Store("native", root())
        self.stem = f"successors_{digest[:24]}"
        self.store.folder()  # a cache folder that cannot be made: OSError, no native kernels
        self.building: subprocess.Popen[bytes] | None = None
        self.function: Any = None
        self.canonical_function: Any = None  # with symmetry, once the library is loaded
        self.sets: NativeSets | None = None  # the set loops, once the library is loaded
        self.failed = False  # generation or compilation failed: the array kernels stay in charge
        self.capacity = 0
        self.rebuilt = False  # a cached library failed to load and was compiled again
        entry = self.store.read(self.stem, ".so")
        if entry is not None:
            self._load(entry)
        if self.function is None and eager:
            self.ready(THRESHOLD, wait=True)

    def ready(self, stored: int, wait: bool = False) -> bool:
        """Whether the library is loaded: compiling starts (in the background) once ``stored``
        reaches ``THRESHOLD``, and the library is loaded once the compiler has finished."""
        if self.function is not None or self.failed:
            return self.function is not None
        if self.building is None:
            if stored < THRESHOLD:
                return False
            self._build()
            if self.building is None:
                return False
        if not wait and self.memory_cap is None and self.building.poll() is None:
            return False
        self.building.wait()
        entry = self.store.read(self.stem, ".so") if self.building.returncode == 0 else None
        if entry is None:
            self.failed = True
            return False
        self._load(entry)
        return self.function is not None

    def _build(self) -> None:
        """Generate the source and start the compiler on it in a private build folder. The
        compiler's library is signed and installed by ``python -m lockstep.cache install`` at the
        end of the same shell command, so a compile that outlives the search, whose small model
        finished first, still serves the next run."""
        try:
            native = native_source(self.arrays.source, self.words)
            build = Path(tempfile.mkdtemp(prefix=f".{self.stem}.", dir=self.store.folder()))
        except (Unsupported, OSError):
            self.failed = True
            return
        source, output = build / "successors.c", build / "successors.so"
        source.write_text(native)
        compile_command = [*self.command, "-o", str(output), str(source)]
        install = [sys.executable, "-m", "lockstep.cache", "install", str(self.store.base), "native", self.stem]
        install += [".so", str(output)]
        quoted = " ".join(shlex.quote(part) for part in compile_command)
        if self.memory_cap is not None:  # the compiler within what the search leaves under the cap
            room = (self.memory_cap - resident_memory_bytes()) // 1024
            if room < MINIMUM_COMPILE_KILOBYTES:
                shutil.rmtree(build, ignore_errors=True)
                self.failed = True
                return
            quoted = f"(ulimit -v {room} && exec {quoted})"
        installed = " ".join(shlex.quote(part) for part in install)
        self.building = subprocess.Popen(  # noqa: S603 - the configured compiler on our own generated source
            ["/bin/sh", "-c", f"{quoted} && {installed}; status=$?; rm -rf {shlex.quote(str(build))}; exit $status"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def _load(self, entry: Entry) -> None:
        try:
            library = _opened(entry)
            function, predicates, kinds = library.successors, library.predicates, library.kinds
            sets = NativeSets(library)
        except (OSError, AttributeError) as error:  # a library that does not load: compiled again
            self.store.reject(entry.path, f"it does not load ({type(error).__name__})")
            if not self.rebuilt:
                self.rebuilt = True
                self._build()
            return
        pointer, integer = ctypes.c_void_p, ctypes.c_int64
        function.argtypes = [pointer, integer, integer, *[pointer] * 6, integer, pointer]
        function.restype = ctypes.c_int64
        predicates.argtypes = [pointer, integer, integer, pointer]
        predicates.restype = ctypes.c_int
        kinds.argtypes = [pointer]
        values = np.zeros(max(1, kinds(None)), dtype=np.int8)  # the first call counts the properties
        count = kinds(values.ctypes.data)
        self.values: list[Any] = [{0: False, 1: True, 2: None, 3: "row"}[int(kind)] for kind in values[:count]]
        self.predicate_function = predicates
        self.canonical_function = getattr(library, "canonical", None) if self.arrays.canonical else None
        if self.canonical_function is not None:
            self.canonical_function.argtypes = [pointer, integer, integer, pointer]
            self.canonical_function.restype = None
        self.sets = sets
        self.function = function

    def predicates(self, states: np.ndarray) -> tuple[tuple[Any, ...], Any]:
        """Each property's value over ``states`` (as ``Kernels.predicates`` gives it); the array
        kernels' where the library is not loaded or a row fails to evaluate (they report it)."""
        rows = int(states.shape[1])
        if self.function is None or not rows:
            values, error = self.arrays.predicates(states)
            return tuple(values), error
        if states.strides[1] != states.itemsize:
            states = np.ascontiguousarray(states)
        out = np.empty((len(self.values), rows), dtype=np.int8)
        if self.predicate_function(states.ctypes.data, states.strides[0] // states.itemsize, rows, out.ctypes.data):
            values, error = self.arrays.predicates(states)
            return tuple(values), error
        masks = out.view(np.bool_)
        return tuple(masks[position] if value == "row" else value for position, value in enumerate(self.values)), False

    def canonical(self, states: np.ndarray) -> np.ndarray | None:
        """The representatives of ``states`` (words x rows), as the array kernels' ``canonical``
        gives them, or None when the library (or its ``canonical``) is not loaded."""
        if self.canonical_function is None:
            return None
        if states.strides[1] != states.itemsize:
            states = np.ascontiguousarray(states)
        rows = int(states.shape[1])
        out = np.empty((self.words, rows), dtype=np.int64)
        self.canonical_function(states.ctypes.data, states.strides[0] // states.itemsize, rows, out.ctypes.data)
        return out

    def expand(self, chunk: np.ndarray, stored: int) -> Expansion | None:
        """The successors of ``chunk`` (words x rows) with their fingerprints, or None when the
        library is not there (yet), or a row fails or leaves a sort (the array kernels then redo it)."""
        if not self.ready(stored):
            return None
        rows = int(chunk.shape[1])
        if chunk.strides[1] != chunk.itemsize:
            chunk = np.ascontiguousarray(chunk)
        capacity = max(self.capacity, 4 * rows, 1024)
        counts = np.zeros(self.tuples, dtype=np.int64)
        enabled = np.empty(rows, dtype=np.int8)
        bad = np.zeros(1, dtype=np.int64)
        while True:
            out, fingerprints, parent, via = self._buffers(capacity)
            counts[:] = 0
            total = self.function(
                chunk.ctypes.data,
                chunk.strides[0] // chunk.itemsize,
                rows,
                *(array.ctypes.data for array in (out, fingerprints, parent, via, counts, enabled)),
                capacity,
                bad.ctypes.data,
            )
            if bad[0]:
                return None
            if total <= capacity:
                break
            capacity = total + total // 4  # too small: grow, redo
        return Expansion(
            out[:, :total], parent[:total], via[:total], counts.tolist(), enabled.view(np.bool_), fingerprints[:total]
        )

    def _buffers(self, capacity: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The output arrays (``capacity`` is never less than the last one), kept from call to call
        (fresh pages cost more than the loop's stores): what ``expand`` returns is valid until its
        next call, and the search copies what it keeps."""
        if capacity > self.capacity:
            self.capacity = capacity
            self._out = np.empty((self.words, capacity), dtype=np.int64)
            self._columns = np.empty((3, capacity), dtype=np.int64)  # fingerprints, parent rows, tuple ids
        return self._out, self._columns[0], self._columns[1], self._columns[2]  # capacity is self.capacity


def native_kernels(arrays: Kernels, choice: str = "auto", memory_cap: int | None = None) -> NativeKernels | None:
    """The native kernels for ``bfs-vec``, or None: ``choice`` ``arrays``, or no C compiler. ``c``
    compiles them before the first level; ``auto`` once a search is large enough (``THRESHOLD``).
    ``memory_cap``: an explicit limit on memory, which the compiler stays within (module doc)."""
    command = compiler()
    if choice == "arrays" or command is None:
        return None
    try:
        return NativeKernels(arrays, command, eager=choice == "c", memory_cap=memory_cap)
    except OSError:  # the cache folder cannot be written: no library to build
        return None


__all__ = ["THRESHOLD", "NativeKernels", "compiler", "native_kernels", "native_source"]
