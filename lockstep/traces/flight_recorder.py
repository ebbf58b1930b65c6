"""Reading PyTorch flight-recorder dumps: one file per rank, pickle or JSON, into typed entries.

A flight-recorder dump is what ``torch._C._distributed_c10d._dump_fr_trace()`` (pickle) or
``_dump_fr_trace_json()`` (JSON) returns, and what the NCCL watchdog writes on a timeout to
``$TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>`` (default ``/tmp/nccl_trace_rank_<rank>``). The field
names are those of ``torch/csrc/distributed/c10d/FlightRecorder.hpp`` (format version "2.10" in
torch 2.11 to 2.13): a top-level dict with ``version``, ``pg_config``, ``pg_status``,
``comm_lib_version`` and ``entries``; each entry has ``record_id``, ``pg_id``, ``process_group``
(name, description), ``collective_seq_id``, ``p2p_seq_id``, ``op_id``, ``profiling_name``
(``gloo:all_reduce``, ``nccl:send 0->1``), ``input_sizes``/``input_dtypes``,
``output_sizes``/``output_dtypes``, ``state`` (scheduled, started, completed), ``retired``,
``timeout_ms``, ``is_p2p``, ``time_*`` stamps and, in pickle dumps only, ``frames``.

This module owns the reading and nothing else: a pickle is first scanned opcode by opcode and
refused unless it holds only containers and scalars, then loaded by an unpickler whose
``find_class`` refuses everything, so a dump can never import or call anything. A dump is data
with limits, so that a hostile one ends in bounded time and memory: at most ``MAX_DUMP_BYTES``
read, ``MAX_PICKLE_OPERATIONS`` opcodes, integers within 64 bits, dict keys and set items that are
scalars (hashing a deep tuple key overflows the C stack), and once loaded at most ``MAX_EXPANDED``
elements counted as the readers below expand them (a memo reference counts as many elements as
what it refers to, so a list of 20000 references to one 20000-element list is 400 million; text
counts a unit per ``TEXT_UNIT`` characters), no deeper than ``MAX_NESTING`` and with no container
inside itself. Per dump at most ``MAX_ENTRIES`` entries, ``MAX_FRAMES`` frames and
``MAX_TENSORS`` shapes of ``MAX_DIMENSIONS`` each per entry; per directory at most ``MAX_DUMPS``
dumps and ``MAX_TOTAL_ENTRIES`` entries. Counters, ids and ranks are integers from 0 to 2**63-1.

The rank comes from the digits that end the file name (as in the stock analyzer). A directory
that ``lockstep run --flight-recorder`` wrote holds the CPU recorder's dumps and, with NCCL, the
NCCL recorder's in its ``nccl/`` folder: each rank's two dumps are read as one (``RankDump.paths``).
Every problem that makes a file unreadable raises ``FlightRecorderError`` naming the file (and the
entry and field where there is one); what is readable but incomplete (a wrapped ring buffer, mixed
format versions) becomes a warning. Imports only the standard library.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import pickle
import pickletools
import re
import reprlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

KNOWN_VERSIONS = ("2.10",)  # what torch 2.11 to 2.13 write (FlightRecorder.hpp's version_val)
DUMP_SUFFIXES = ("", ".pkl", ".pickle", ".json", ".flight-recorder")  # the last: `lockstep run --flight-recorder`
NCCL_FOLDER = "nccl"  # `lockstep run --flight-recorder --backend nccl`: the NCCL recorder's dumps
MAPPING_FILE = "flight-recorder-mapping.json"  # beside the dumps `lockstep run --flight-recorder` wrote

MAX_DUMP_BYTES = 128 * 1024 * 1024  # a 2000-entry dump with its Python frames: a few MB
MAX_PICKLE_OPERATIONS = 10_000_000
MAX_EXPANDED = 20_000_000  # elements (and TEXT_UNIT-character units of text) of a dump as expanded
TEXT_UNIT = 8
MAX_NESTING = 64  # a dump nests 5 deep
MAX_ENTRIES = 200_000  # per dump (torch's default ring buffer holds 2000)
MAX_FRAMES = 10_000  # per entry
MAX_TENSORS = 10_000  # shapes per entry's input or output sizes
MAX_DIMENSIONS = 1024  # per shape
MAX_DUMPS = 65_536  # per directory
MAX_TOTAL_ENTRIES = 2_000_000  # per directory
MAX_COUNT = 2**63 - 1  # torch's counters are int64
MAX_RANK = 2**31 - 1
_RANK_AT_END = re.compile(r"(\d+)$")
_DECIMAL = re.compile(r"-?[0-9]{1,19}")
_SCALAR, _CONTAINER = 0, 1
_CONTAINER_TYPES = frozenset({list, tuple, dict, set, frozenset})
_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 60
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = _SHOWN.maxset = _SHOWN.maxfrozenset = 4
_SHOWN.maxlevel = 3

# Opcodes that build containers and scalars; everything else (GLOBAL, STACK_GLOBAL, REDUCE, BUILD,
# INST, OBJ, NEWOBJ, NEWOBJ_EX, EXT1/2/4, PERSID, BINPERSID, buffers) is refused before loading.
_SAFE_OPCODES = frozenset(
    {
        "PROTO",
        "FRAME",
        "STOP",
        "MARK",
        "POP",
        "POP_MARK",
        "DUP",
        "INT",
        "BININT",
        "BININT1",
        "BININT2",
        "LONG",
        "LONG1",
        "LONG4",
        "FLOAT",
        "BINFLOAT",
        "NONE",
        "NEWTRUE",
        "NEWFALSE",
        "STRING",
        "BINSTRING",
        "SHORT_BINSTRING",
        "UNICODE",
        "BINUNICODE",
        "SHORT_BINUNICODE",
        "BINUNICODE8",
        "BINBYTES",
        "SHORT_BINBYTES",
        "BINBYTES8",
        "EMPTY_LIST",
        "APPEND",
        "APPENDS",
        "LIST",
        "EMPTY_TUPLE",
        "TUPLE",
        "TUPLE1",
        "TUPLE2",
        "TUPLE3",
        "EMPTY_DICT",
        "DICT",
        "SETITEM",
        "SETITEMS",
        "EMPTY_SET",
        "ADDITEMS",
        "FROZENSET",
        "PUT",
        "BINPUT",
        "LONG_BINPUT",
        "GET",
        "BINGET",
        "LONG_BINGET",
        "MEMOIZE",
    }
)
# The opcodes that push one scalar (number, text, bytes, None, True, False): most of a dump.
_SCALAR_OPCODES = _SAFE_OPCODES - {
    "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP", "EMPTY_LIST", "APPEND", "APPENDS", "LIST",
    "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS", "EMPTY_SET",
    "ADDITEMS", "FROZENSET", "PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET", "MEMOIZE",
}  # fmt: skip


class FlightRecorderError(ValueError):
    """A dump (or a directory of dumps) that cannot be read; ``str()`` names the file and the problem."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


@dataclass(frozen=True)
class Frame:
    """One Python frame of the call that posted an entry (innermost first, as torch records them)."""

    name: str
    filename: str
    line: int


@dataclass(frozen=True)
class FlightRecorderEntry:
    """One work item of one process group, as one rank recorded it."""

    record_id: int
    group_index: int  # pg_id: per process, in creation order
    group_name: str  # "" for a group torch did not register (how vLLM creates its DP group)
    group_description: str
    collective_sequence: int  # collective_seq_id: per group, 1, 2, ...
    p2p_sequence: int
    operation_index: int  # op_id: one per logical op, several per coalesced kernel
    profiling_name: str  # "gloo:all_reduce", "nccl:send 0->1"
    input_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_sizes: tuple[tuple[int, ...], ...]
    output_dtypes: tuple[str, ...]
    state: str  # scheduled, started or completed (gloo entries stay "scheduled" in torch 2.11)
    is_p2p: bool
    retired: bool | None
    timeout_ms: int | None
    time_created_ns: int | None
    frames: tuple[Frame, ...]

    @property
    def backend(self) -> str:
        return self.profiling_name.partition(":")[0] if ":" in self.profiling_name else ""

    @property
    def operation(self) -> str:
        """The op without its backend and peers: ``all_reduce``, ``send``."""
        name = self.profiling_name.partition(":")[2] if ":" in self.profiling_name else self.profiling_name
        return name.split(" ")[0]


@dataclass(frozen=True)
class GroupConfig:
    """A ``pg_config`` row: the group's name, description and global ranks (NCCL records them; gloo does not)."""

    name: str
    description: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class RankDump:
    """One rank's dump (or, in a directory ``lockstep run --flight-recorder`` wrote with NCCL, its
    CPU recorder's and its NCCL recorder's dumps read as one: ``paths`` names both)."""

    path: Path
    rank: int
    encoding: Literal["pickle", "json"]
    version: str
    communication_library_version: str
    groups: tuple[GroupConfig, ...]
    group_status: dict[str, dict[str, int]]  # pg_id -> last_enqueued/started/completed_collective
    entries: tuple[FlightRecorderEntry, ...]
    warnings: tuple[str, ...] = ()
    paths: tuple[Path, ...] = ()  # every file read for this rank, ``path`` first
    wrapped: bool = False  # a ring buffer lost its oldest entries (the first record id is not 0)
    expanded: int = 0  # the elements read, as counted against MAX_EXPANDED

    def members_of(self, group_name: str) -> tuple[int, ...]:
        for group in self.groups:
            if group.name == group_name and group.ranks:
                return group.ranks
        return ()


@dataclass(frozen=True)
class FlightRecorderDirectory:
    """Every rank's dump found in one directory (or one dump file), ordered by rank."""

    path: Path
    dumps: tuple[RankDump, ...]
    ignored: tuple[str, ...] = ()  # file names that are not dumps (README.md, ...)
    warnings: tuple[str, ...] = field(default=())
    folders: tuple[Path, ...] = ()  # folders read besides ``path`` (a run's nccl/)

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(dump.rank for dump in self.dumps)


def shown(value: object) -> str:
    """``repr(value)`` cut short (a few items, 60 characters of text): for messages about untrusted values."""
    return _SHOWN.repr(value)


def decimal(text: str, negative: bool = False) -> int | None:
    """The integer an ASCII decimal of at most 19 digits spells (``negative``: a leading ``-`` too), or None."""
    if not _DECIMAL.fullmatch(text) or (text.startswith("-") and not negative):
        return None
    return int(text)


class _RefusingUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to import {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused a persistent id")


class _PickleScan:
    """The opcode scan: the unpickler's stack replayed with each item only marked scalar or container."""

    def __init__(self, origin: str | Path) -> None:
        self.origin = origin
        self.stack: list[int] = []
        self.marks: list[list[int]] = []
        self.memo: dict[int, int] = {}

    def refuse(self, problem: str) -> FlightRecorderError:
        return FlightRecorderError(self.origin, problem)

    def pop_mark(self) -> list[int]:
        if not self.marks:
            raise self.refuse("corrupt pickle (no MARK to pop)")
        items, self.stack = self.stack, self.marks.pop()
        return items

    def pop(self, count: int) -> None:
        if len(self.stack) < count:
            raise self.refuse("corrupt pickle (an opcode takes more items than the stack holds)")
        del self.stack[len(self.stack) - count :]

    def top(self) -> int:
        if not self.stack:
            raise self.refuse("corrupt pickle (an opcode needs an item and the stack is empty)")
        return self.stack[-1]

    def keys_are_scalars(self, items: list[int], step: int, position: int | None) -> None:
        if any(kind == _CONTAINER for kind in items[::step]):
            raise self.refuse(
                f"refused: a dict key or set item at byte {position} is a container; a flight-recorder dump's "
                "keys are strings and numbers"
            )

    def step(self, name: str, argument: object, position: int | None) -> None:
        """Replay one opcode (``name`` is in ``_SAFE_OPCODES``)."""
        stack = self.stack
        if name in ("PROTO", "FRAME", "STOP"):
            return
        if name == "MARK":
            self.marks.append(stack)
            self.stack = []
        elif name == "POP" and stack:
            self.pop(1)
        elif name == "POP":
            self.pop_mark()
        elif name == "POP_MARK":
            self.pop_mark()
        elif name == "DUP":
            stack.append(self.top())
        elif name in ("EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET", "EMPTY_TUPLE"):
            stack.append(_CONTAINER)
        elif name == "APPEND":
            self.pop(1)
            self.top()
        elif name in ("APPENDS", "SETITEMS", "ADDITEMS"):
            items = self.pop_mark()
            if name != "APPENDS":
                self.keys_are_scalars(items, 2 if name == "SETITEMS" else 1, position)
            self.top()
        elif name in ("LIST", "TUPLE", "DICT", "FROZENSET"):
            items = self.pop_mark()
            if name in ("DICT", "FROZENSET"):
                self.keys_are_scalars(items, 2 if name == "DICT" else 1, position)
            self.stack.append(_CONTAINER)
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            self.pop(int(name[-1]))
            stack.append(_CONTAINER)
        elif name == "SETITEM":
            if len(stack) < 3:
                raise self.refuse("corrupt pickle (SETITEM without a dict, key and value)")
            self.keys_are_scalars([stack[-2]], 1, position)
            self.pop(2)
        elif name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
            key = len(self.memo) if name == "MEMOIZE" else argument
            assert isinstance(key, int)
            self.memo[key] = self.top()
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            assert isinstance(argument, int)
            if argument not in self.memo:
                raise self.refuse(f"corrupt pickle (a reference to memo {argument}, which was never stored)")
            stack.append(self.memo[argument])
        else:  # a scalar: numbers, text, bytes, None, True, False
            self.scalar(argument, position)

    def scalar(self, argument: object, position: int | None) -> None:
        if type(argument) is int and not -(2**64) <= argument < 2**64:
            raise self.refuse(
                f"an integer of {argument.bit_length()} bits at byte {position}; a flight-recorder dump's "
                "numbers fit 64 bits"
            )
        self.stack.append(_SCALAR)


def restricted_loads(data: bytes, origin: str | Path) -> object:
    """Unpickle ``data`` if it holds only containers and scalars within the module's bounds; raise
    ``FlightRecorderError`` otherwise."""
    scan = _PickleScan(origin)
    try:
        for count, (opcode, argument, position) in enumerate(pickletools.genops(data), start=1):
            if count > MAX_PICKLE_OPERATIONS:
                raise FlightRecorderError(
                    origin, f"refused: more than {MAX_PICKLE_OPERATIONS} pickle operations (lockstep's bound per dump)"
                )
            name = opcode.name
            if name in _SCALAR_OPCODES:  # the common case first
                scan.scalar(argument, position)
            elif name == "MEMOIZE":
                scan.memo[len(scan.memo)] = scan.top()
            elif name in _SAFE_OPCODES:
                scan.step(name, argument, position)
            else:
                detail = f" {shown(argument)}" if argument is not None else ""
                raise FlightRecorderError(
                    origin,
                    f"refused: the pickle asks for {name}{detail} at byte {position}; a flight-recorder "
                    "dump holds only containers and scalars, so lockstep will not import or call anything",
                )
    except FlightRecorderError:
        raise
    except Exception as error:  # pickletools raises ValueError (truncated) and others on garbage
        raise FlightRecorderError(origin, f"truncated or corrupt pickle ({error})") from None
    try:
        return _RefusingUnpickler(io.BytesIO(data)).load()
    except Exception as error:
        raise FlightRecorderError(origin, f"unreadable pickle ({type(error).__name__}: {error})") from None


def load_json(data: bytes, origin: str | Path) -> object:
    """A JSON document (a dump or a mapping file); ``FlightRecorderError`` naming ``origin`` for text
    that is not JSON, nested too deeply for Python's parser, or holding an integer over 20 digits."""

    def integer(text: str) -> int:
        if len(text.lstrip("-")) > 20:
            raise _LongInteger(len(text.lstrip("-")))
        return int(text)

    try:
        return json.loads(data.decode("utf-8"), parse_int=integer)
    except _LongInteger as error:
        raise FlightRecorderError(origin, f"an integer of {error.digits} digits (at most 20)") from None
    except RecursionError:
        raise FlightRecorderError(origin, "JSON nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as error:  # JSONDecodeError is a ValueError
        raise FlightRecorderError(origin, f"truncated or corrupt JSON ({error})") from None


class _LongInteger(Exception):
    def __init__(self, digits: int) -> None:
        super().__init__(digits)
        self.digits = digits


def measure(document: object, origin: str | Path) -> int:
    """The number of elements ``document`` expands to (each reference to a container counts what it
    holds; text a unit per ``TEXT_UNIT`` characters); ``FlightRecorderError`` past ``MAX_EXPANDED``,
    deeper than ``MAX_NESTING`` or with a container inside itself. Walks each container once."""

    def children(value: Any) -> Iterator[object]:
        return itertools.chain.from_iterable(value.items()) if type(value) is dict else iter(value)

    def too_large() -> FlightRecorderError:
        return FlightRecorderError(
            origin,
            f"refused: the dump expands to more than {MAX_EXPANDED} elements (lockstep's bound per dump; "
            "a dump that refers to one list many times counts it each time)",
        )

    if type(document) not in _CONTAINER_TYPES:
        return 1 + len(document) // TEXT_UNIT if isinstance(document, (str, bytes)) else 1
    done: dict[int, int] = {}  # id of a container walked -> what it expands to
    parents: list[tuple[int, Iterator[object], int]] = []  # the containers being walked, outermost first
    key, items, size = id(document), children(document), 1
    open_ids = {key}
    while True:
        for child in items:
            kind = type(child)
            if kind is str or kind is bytes:
                size += 1 + len(child) // TEXT_UNIT  # type: ignore[arg-type]
            elif kind in _CONTAINER_TYPES:
                inner = id(child)
                if inner in done:
                    size += done[inner]
                elif inner in open_ids:
                    raise FlightRecorderError(origin, "refused: a container that holds itself")
                elif len(parents) + 1 >= MAX_NESTING:
                    raise FlightRecorderError(origin, f"refused: nested more than {MAX_NESTING} deep")
                else:
                    parents.append((key, items, size))
                    key, items, size = inner, children(child), 1
                    open_ids.add(key)
                    break
            else:
                size += 1
            if size > MAX_EXPANDED:
                raise too_large()
        else:
            open_ids.discard(key)
            done[key] = size
            if not parents:
                return size
            key, items, outer = parents.pop()
            size += outer
            if size > MAX_EXPANDED:
                raise too_large()


def read_bounded(path: Path, limit: int = MAX_DUMP_BYTES) -> bytes:
    """``path``'s bytes; ``FlightRecorderError`` if it cannot be read or holds more than ``limit``."""
    try:
        with path.open("rb") as file:
            data = file.read(limit + 1)
    except OSError as error:
        raise FlightRecorderError(path, f"cannot read: {error.strerror or error}") from None
    if len(data) > limit:
        raise FlightRecorderError(path, f"refused: larger than {limit // (1024 * 1024)} MiB (lockstep's bound)")
    return data


def rank_from_name(path: Path) -> int | None:
    """The rank a dump's file name ends with (``nccl_trace_rank_3``, ``rank3.json``), or None."""
    stem = path.name[: -len(path.suffix)] if path.suffix in DUMP_SUFFIXES[1:] else path.name
    found = _RANK_AT_END.search(stem)
    if not found or len(found.group(1)) > 10:
        return None
    rank = int(found.group(1))
    return rank if rank <= MAX_RANK else None


def read_dump(path: str | Path, rank: int | None = None) -> RankDump:
    """Read one rank's dump (pickle or JSON, told apart by the first byte)."""
    path = Path(path)
    if rank is None:
        rank = rank_from_name(path)
        if rank is None:
            raise FlightRecorderError(
                path, f"the file name does not end with a rank number (0 to {MAX_RANK}, as nccl_trace_rank_0 does)"
            )
    data = read_bounded(path)
    stripped = data.lstrip()
    if not stripped:
        raise FlightRecorderError(path, "empty file (a dump cut off before anything was written?)")
    encoding: Literal["pickle", "json"]
    if stripped[:1] == b"\x80":
        encoding, document = "pickle", restricted_loads(data, path)
    elif stripped[:1] == b"{":
        encoding, document = "json", load_json(data, path)
    elif stripped[:1] in (b"(", b"}", b"]", b"c"):  # protocols 0 and 1 have no PROTO: MARK, dict, list or GLOBAL
        encoding, document = "pickle", restricted_loads(data, path)
    else:
        raise FlightRecorderError(path, "neither a pickle nor a JSON flight-recorder dump")
    expanded = measure(document, path)
    return dataclasses.replace(_dump_from_document(path, rank, encoding, document), expanded=expanded)


def read_directory(path: str | Path) -> FlightRecorderDirectory:
    """Read every rank's dump in ``path``: files whose names end with a rank number; others are
    ignored. A directory ``lockstep run --flight-recorder`` wrote has its NCCL recorder's dumps in
    ``nccl/``: each is read with the same rank's dump beside it. ``path`` may also be one dump file."""
    path = Path(path)
    if path.is_file():
        dump = read_dump(path)
        warnings = [*dump.warnings, f"only one rank's dump ({path.name}): other ranks cannot be compared with it"]
        return FlightRecorderDirectory(path, (dump,), (), tuple(warnings))
    if not path.is_dir():
        raise FlightRecorderError(path, "not a directory or a dump file")
    dumps, ignored = _read_folder(path)
    folders: list[Path] = []
    nccl = path / NCCL_FOLDER
    if nccl.is_dir() and any(rank_from_name(file) is not None for file in _dump_files(nccl)[0]):
        folders.append(nccl)
        ignored.remove(NCCL_FOLDER)
        recorded, _ = _read_folder(nccl)
        for rank, dump in recorded.items():
            dumps[rank] = _joined(dumps[rank], dump) if rank in dumps else dump
    if not dumps:
        found = [name for name in ignored if (path / name).is_dir()]
        hint = f"; try one of its folders: {', '.join(found)}" if found else ""
        raise FlightRecorderError(
            path,
            "no flight-recorder dumps (files named like nccl_trace_rank_0, rank0.json or "
            f"rank-0.flight-recorder){hint}",
        )
    ordered = tuple(dumps[rank] for rank in sorted(dumps))
    total = sum(len(dump.entries) for dump in ordered)
    if total > MAX_TOTAL_ENTRIES:
        raise FlightRecorderError(
            path, f"refused: {total} entries in all (lockstep's bound per directory is {MAX_TOTAL_ENTRIES})"
        )
    warnings = [warning for dump in ordered for warning in dump.warnings]
    versions = {dump.version for dump in ordered}
    if len(versions) > 1:
        listing = ", ".join(f"{dump.path.name} {dump.version}" for dump in ordered)
        warnings.append(f"dumps of different format versions ({listing}): each is read by its own fields")
    if len(ordered) == 1:
        warnings.append(f"only one rank's dump ({ordered[0].path.name}): other ranks cannot be compared with it")
    if (path / "nccl-timeout").is_dir():
        warnings.append(
            "nccl-timeout/ holds the NCCL watchdog's own dumps (taken on a timeout): they are not read here; "
            f"read them with --flight-recorder {path / 'nccl-timeout'}"
        )
    return FlightRecorderDirectory(path, ordered, tuple(ignored), tuple(warnings), tuple(folders))


def _dump_files(folder: Path) -> tuple[list[Path], list[str]]:
    """The files of ``folder`` that may be dumps, and the names of the others."""
    files: list[Path] = []
    ignored: list[str] = []
    for count, file in enumerate(sorted(folder.iterdir()), start=1):
        if count > MAX_DUMPS + 1000:
            raise FlightRecorderError(folder, f"refused: more than {MAX_DUMPS} files (lockstep's bound per directory)")
        if file.name.startswith(".") or file.suffix not in DUMP_SUFFIXES or rank_from_name(file) is None:
            ignored.append(file.name)
        elif not file.is_file():
            ignored.append(file.name)
        else:
            files.append(file)
    if len(files) > MAX_DUMPS:
        raise FlightRecorderError(
            folder, f"refused: {len(files)} dumps (lockstep's bound per directory is {MAX_DUMPS})"
        )
    return files, ignored


def _read_folder(folder: Path) -> tuple[dict[int, RankDump], list[str]]:
    files, ignored = _dump_files(folder)
    dumps: dict[int, RankDump] = {}
    for file in files:
        rank = rank_from_name(file)
        assert rank is not None
        if rank in dumps:
            raise FlightRecorderError(folder, f"two dumps for rank {rank}: {dumps[rank].path.name} and {file.name}")
        dumps[rank] = read_dump(file, rank)
    return dumps, ignored


def _joined(cpu: RankDump, nccl: RankDump) -> RankDump:
    """A rank's CPU-recorder dump and its NCCL-recorder dump as one: entries in order of creation.
    A group in both (two backends of one group count their sequence ids apart) keeps its CPU entries
    under its name; the NCCL recorder's are read as group ``NAME/nccl``."""
    warnings = list(cpu.warnings) + list(nccl.warnings)
    both = {entry.group_name or f"pg_id {entry.group_index}" for entry in cpu.entries} & {
        entry.group_name or f"pg_id {entry.group_index}" for entry in nccl.entries
    }
    entries = list(nccl.entries)
    groups = list(nccl.groups)
    if both:
        label = ", ".join(sorted(both))
        warnings.append(
            f"rank {cpu.rank}: group {label} is in both {cpu.path.name} and {NCCL_FOLDER}/{nccl.path.name}: "
            f"the NCCL recorder's entries are read as group NAME/{NCCL_FOLDER}"
        )
        entries = [
            dataclasses.replace(entry, group_name=f"{entry.group_name or f'pg_id {entry.group_index}'}/{NCCL_FOLDER}")
            if (entry.group_name or f"pg_id {entry.group_index}") in both
            else entry
            for entry in entries
        ]
        groups = [
            dataclasses.replace(group, name=f"{group.name}/{NCCL_FOLDER}") if group.name in both else group
            for group in groups
        ]
    if cpu.version != nccl.version:
        warnings.append(
            f"rank {cpu.rank}: {cpu.path.name} is format {cpu.version}, {NCCL_FOLDER}/{nccl.path.name} "
            f"{nccl.version}: each is read by its own fields"
        )
    merged = list(cpu.entries) + entries
    if all(entry.time_created_ns is not None for entry in merged):
        merged.sort(key=lambda entry: entry.time_created_ns or 0)  # stable: each recorder's order is kept
    return RankDump(
        cpu.path,
        cpu.rank,
        cpu.encoding,
        cpu.version,
        cpu.communication_library_version or nccl.communication_library_version,
        cpu.groups + tuple(groups),
        {**nccl.group_status, **cpu.group_status},
        tuple(merged),
        tuple(warnings),
        (*cpu.paths, *nccl.paths),
        cpu.wrapped or nccl.wrapped,
        cpu.expanded + nccl.expanded,
    )


def _dump_from_document(path: Path, rank: int, encoding: Literal["pickle", "json"], document: object) -> RankDump:
    if not isinstance(document, dict):
        raise FlightRecorderError(path, f"a dump is a dict, this is a {type(document).__name__}")
    version = document.get("version")
    if not isinstance(version, str):
        raise FlightRecorderError(path, "no format version: not a flight-recorder dump")
    if "entries" not in document:
        raise FlightRecorderError(path, "no entries (dumped with includeCollectives=False?)")
    raw_entries = document["entries"]
    if not isinstance(raw_entries, list):
        raise FlightRecorderError(path, "entries is not a list")
    if len(raw_entries) > MAX_ENTRIES:
        raise FlightRecorderError(
            path, f"refused: {len(raw_entries)} entries (lockstep's bound per dump is {MAX_ENTRIES})"
        )
    warnings = []
    if version not in KNOWN_VERSIONS:
        named = version if len(version) <= 40 else shown(version)
        warnings.append(
            f"{path.name}: format version {named} (lockstep knows {', '.join(KNOWN_VERSIONS)}); "
            "read by the fields it has"
        )
    entries = tuple(_entry(path, index, raw, encoding) for index, raw in enumerate(raw_entries))
    wrapped = bool(entries) and entries[0].record_id > 0
    if wrapped:
        warnings.append(
            f"{path.name}: the ring buffer wrapped; the oldest {entries[0].record_id} entries are lost "
            f"(first record id {entries[0].record_id})"
        )
    library = document.get("comm_lib_version", "")
    return RankDump(
        path,
        rank,
        encoding,
        version,
        library if isinstance(library, str) else "",
        _groups(path, document.get("pg_config")),
        _status(document.get("pg_status")),
        entries,
        tuple(warnings),
        (path,),
        wrapped,
    )


def _entry(path: Path, index: int, raw: object, encoding: str) -> FlightRecorderEntry:
    where = f"entry {index}"
    if not isinstance(raw, dict):
        raise FlightRecorderError(path, f"{where} is not a dict")

    def count(key: str, value: object) -> int:
        if isinstance(value, str) and decimal(value, negative=True) is not None:
            value = decimal(value, negative=True)
        if isinstance(value, bool) or not isinstance(value, int):
            raise FlightRecorderError(path, f"{where}: {key} is missing or not an integer ({shown(value)})")
        if value < 0:
            raise FlightRecorderError(
                path, f"{where}: {key} is negative ({value}); counters, ids and ranks are 0 or more"
            )
        if value > MAX_COUNT:
            raise FlightRecorderError(path, f"{where}: {key} is out of range ({shown(value)}; at most 2**63-1)")
        return value

    def integer(key: str, default: int | None = None) -> int:
        return default if key not in raw and default is not None else count(key, raw.get(key))

    def optional_integer(key: str) -> int | None:
        value = raw.get(key)
        return count(key, value) if isinstance(value, int) and not isinstance(value, bool) else None

    group = raw.get("process_group")
    if not (isinstance(group, (list, tuple)) and len(group) == 2 and all(isinstance(part, str) for part in group)):
        raise FlightRecorderError(path, f"{where}: process_group is missing or not (name, description)")
    name = raw.get("profiling_name")
    if not isinstance(name, str):
        raise FlightRecorderError(path, f"{where}: profiling_name is missing")
    state = raw.get("state")
    if state not in ("scheduled", "started", "completed"):
        raise FlightRecorderError(path, f"{where}: state {shown(state)} is not scheduled, started or completed")
    is_p2p = raw.get("is_p2p")
    if not isinstance(is_p2p, bool):  # older formats: told by the name
        is_p2p = name.partition(":")[2].split(" ")[0] in ("send", "recv")
    retired = raw.get("retired")
    return FlightRecorderEntry(
        record_id=integer("record_id", index),
        group_index=integer("pg_id", -1),
        group_name=group[0],
        group_description=group[1],
        collective_sequence=integer("collective_seq_id"),
        p2p_sequence=integer("p2p_seq_id", 0),
        operation_index=integer("op_id", 0),
        profiling_name=name,
        input_sizes=_sizes(path, where, "input_sizes", raw.get("input_sizes", [])),
        input_dtypes=_dtypes(raw.get("input_dtypes")),
        output_sizes=_sizes(path, where, "output_sizes", raw.get("output_sizes", [])),
        output_dtypes=_dtypes(raw.get("output_dtypes")),
        state=state,
        is_p2p=is_p2p,
        retired=retired if isinstance(retired, bool) else None,
        timeout_ms=optional_integer("timeout_ms"),
        time_created_ns=optional_integer("time_created_ns"),
        frames=_frames(path, where, raw.get("frames")),
    )


def _sizes(path: Path, where: str, key: str, value: object) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(shape, (list, tuple)) and all(isinstance(size, int) for size in shape) for shape in value
    ):
        raise FlightRecorderError(path, f"{where}: {key} are not lists of integers ({shown(value)})")
    if len(value) > MAX_TENSORS or any(len(shape) > MAX_DIMENSIONS for shape in value):
        raise FlightRecorderError(
            path,
            f"{where}: refused: {key} holds more than {MAX_TENSORS} shapes or a shape of more than "
            f"{MAX_DIMENSIONS} dimensions (lockstep's bounds)",
        )
    if any(not 0 <= size <= MAX_COUNT for shape in value for size in shape):
        raise FlightRecorderError(path, f"{where}: {key} holds a size that is negative or over 2**63-1")
    return tuple(tuple(shape) for shape in value)


def _dtypes(value: object) -> tuple[str, ...]:
    return tuple(item for item in value if isinstance(item, str)) if isinstance(value, (list, tuple)) else ()


def _frames(path: Path, where: str, value: object) -> tuple[Frame, ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    if len(value) > MAX_FRAMES:
        raise FlightRecorderError(
            path, f"{where}: refused: {len(value)} frames (lockstep's bound per entry is {MAX_FRAMES})"
        )

    def text(item: dict[Any, Any], key: str) -> str:
        found = item.get(key, "?")
        return found if isinstance(found, str) else "?"

    def line(item: dict[Any, Any]) -> int:
        found = item.get("line")
        return found if isinstance(found, int) and not isinstance(found, bool) and 0 <= found <= MAX_COUNT else 0

    return tuple(
        Frame(text(item, "name"), text(item, "filename"), line(item)) for item in value if isinstance(item, dict)
    )


def _groups(path: Path, value: object) -> tuple[GroupConfig, ...]:
    if not isinstance(value, dict):
        return ()
    groups = []
    for row in value.values():
        if not isinstance(row, dict) or not row.get("name"):
            continue  # gloo dumps hold one empty row {"": {"name": "", "desc": "", "ranks": "[]"}}
        name, description, ranks = row["name"], row.get("desc", ""), row.get("ranks", "[]")
        if not isinstance(name, str):
            raise FlightRecorderError(path, f"pg_config: a group name is not text ({shown(name)})")
        text = ranks.strip() if isinstance(ranks, str) else ""
        if not (text.startswith("[") and text.endswith("]")):
            raise FlightRecorderError(path, f"pg_config ranks of group {shown(name)} are not a list: {shown(ranks)}")
        parts = [decimal(part.strip()) for part in text[1:-1].split(",") if part.strip()]
        if any(part is None or part > MAX_RANK for part in parts):
            raise FlightRecorderError(
                path, f"pg_config ranks of group {shown(name)} are not ranks (0 to {MAX_RANK}): {shown(text)}"
            )
        members = tuple(part for part in parts if part is not None)
        groups.append(GroupConfig(name, description if isinstance(description, str) else "", members))
    return tuple(groups)


def _status(value: object) -> dict[str, dict[str, int]]:
    if not isinstance(value, dict):
        return {}
    status: dict[str, dict[str, int]] = {}
    for key, row in value.items():
        if isinstance(row, dict) and isinstance(key, (str, int)):  # JSON dumps write the numbers as strings
            numbers = {
                str(name): number if isinstance(number, int) else decimal(number, negative=True)
                for name, number in row.items()
                if isinstance(name, str) and isinstance(number, (int, str)) and not isinstance(number, bool)
            }
            status[str(key)] = {name: number for name, number in numbers.items() if number is not None}
    return status
