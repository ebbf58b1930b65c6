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
``find_class`` refuses everything, so a dump can never import or call anything. The rank comes
from the digits that end the file name (as in the stock analyzer). Every problem that makes a
file unreadable raises ``FlightRecorderError`` naming the file; what is readable but incomplete
(a wrapped ring buffer, mixed format versions) becomes a warning. Imports only the standard library.
"""

from __future__ import annotations

import io
import json
import pickle
import pickletools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

KNOWN_VERSIONS = ("2.10",)  # what torch 2.11 to 2.13 write (FlightRecorder.hpp's version_val)
DUMP_SUFFIXES = ("", ".pkl", ".pickle", ".json", ".flight-recorder")  # the last: `lockstep run --flight-recorder`
_RANK_AT_END = re.compile(r"(\d+)$")

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
    """One rank's dump."""

    path: Path
    rank: int
    encoding: Literal["pickle", "json"]
    version: str
    communication_library_version: str
    groups: tuple[GroupConfig, ...]
    group_status: dict[str, dict[str, int]]  # pg_id -> last_enqueued/started/completed_collective
    entries: tuple[FlightRecorderEntry, ...]
    warnings: tuple[str, ...] = ()

    def members_of(self, group_name: str) -> tuple[int, ...]:
        for group in self.groups:
            if group.name == group_name and group.ranks:
                return group.ranks
        return ()


@dataclass(frozen=True)
class FlightRecorderDirectory:
    """Every rank's dump found in one directory, ordered by rank."""

    path: Path
    dumps: tuple[RankDump, ...]
    ignored: tuple[str, ...] = ()  # file names that are not dumps (README.md, ...)
    warnings: tuple[str, ...] = field(default=())

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(dump.rank for dump in self.dumps)


class _RefusingUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to import {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused a persistent id")


def restricted_loads(data: bytes, origin: str | Path) -> object:
    """Unpickle ``data`` if it holds only containers and scalars; raise ``FlightRecorderError`` otherwise."""
    try:
        for opcode, argument, position in pickletools.genops(data):
            if opcode.name not in _SAFE_OPCODES:
                detail = f" {argument!r}" if argument is not None else ""
                raise FlightRecorderError(
                    origin,
                    f"refused: the pickle asks for {opcode.name}{detail} at byte {position}; a flight-recorder "
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


def rank_from_name(path: Path) -> int | None:
    """The rank a dump's file name ends with (``nccl_trace_rank_3``, ``rank3.json``), or None."""
    stem = path.name[: -len(path.suffix)] if path.suffix in DUMP_SUFFIXES[1:] else path.name
    found = _RANK_AT_END.search(stem)
    return int(found.group(1)) if found else None


def read_dump(path: str | Path, rank: int | None = None) -> RankDump:
    """Read one rank's dump (pickle or JSON, told apart by the first byte)."""
    path = Path(path)
    if rank is None:
        rank = rank_from_name(path)
        if rank is None:
            raise FlightRecorderError(path, "the file name does not end with a rank number (as nccl_trace_rank_0 does)")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise FlightRecorderError(path, f"cannot read: {error.strerror or error}") from None
    stripped = data.lstrip()
    if not stripped:
        raise FlightRecorderError(path, "empty file (a dump cut off before anything was written?)")
    encoding: Literal["pickle", "json"]
    if stripped[:1] == b"\x80":
        encoding, document = "pickle", restricted_loads(data, path)
    elif stripped[:1] == b"{":
        encoding = "json"
        try:
            document = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise FlightRecorderError(path, f"truncated or corrupt JSON ({error})") from None
    elif stripped[:1] in (b"(", b"}", b"]", b"c"):  # protocols 0 and 1 have no PROTO: MARK, dict, list or GLOBAL
        encoding, document = "pickle", restricted_loads(data, path)
    else:
        raise FlightRecorderError(path, "neither a pickle nor a JSON flight-recorder dump")
    return _dump_from_document(path, rank, encoding, document)


def read_directory(path: str | Path) -> FlightRecorderDirectory:
    """Read every rank's dump in ``path``: files whose names end with a rank number; others are ignored."""
    path = Path(path)
    if not path.is_dir():
        raise FlightRecorderError(path, "not a directory")
    dumps: dict[int, RankDump] = {}
    ignored: list[str] = []
    for file in sorted(path.iterdir()):
        rank = rank_from_name(file)
        if not file.is_file() or file.name.startswith(".") or file.suffix not in DUMP_SUFFIXES or rank is None:
            ignored.append(file.name)
            continue
        if rank in dumps:
            raise FlightRecorderError(path, f"two dumps for rank {rank}: {dumps[rank].path.name} and {file.name}")
        dumps[rank] = read_dump(file, rank)
    if not dumps:
        folders = [name for name in ignored if (path / name).is_dir()]
        hint = f"; try one of its folders: {', '.join(folders)}" if folders else ""
        raise FlightRecorderError(
            path,
            "no flight-recorder dumps (files named like nccl_trace_rank_0, rank0.json or "
            f"rank-0.flight-recorder){hint}",
        )
    ordered = tuple(dumps[rank] for rank in sorted(dumps))
    warnings = [warning for dump in ordered for warning in dump.warnings]
    versions = {dump.version for dump in ordered}
    if len(versions) > 1:
        listing = ", ".join(f"{dump.path.name} {dump.version}" for dump in ordered)
        warnings.append(f"dumps of different format versions ({listing}): each is read by its own fields")
    if len(ordered) == 1:
        warnings.append(f"only one rank's dump ({ordered[0].path.name}): other ranks cannot be compared with it")
    return FlightRecorderDirectory(path, ordered, tuple(ignored), tuple(warnings))


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
    warnings = []
    if version not in KNOWN_VERSIONS:
        warnings.append(
            f"{path.name}: format version {version} (lockstep knows {', '.join(KNOWN_VERSIONS)}); "
            "read by the fields it has"
        )
    entries = tuple(_entry(path, index, raw, encoding) for index, raw in enumerate(raw_entries))
    if entries and entries[0].record_id > 0:
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
        library if isinstance(library, str) else str(library),
        _groups(path, document.get("pg_config")),
        _status(document.get("pg_status")),
        entries,
        tuple(warnings),
    )


def _entry(path: Path, index: int, raw: object, encoding: str) -> FlightRecorderEntry:
    where = f"entry {index}"
    if not isinstance(raw, dict):
        raise FlightRecorderError(path, f"{where} is not a dict")

    def integer(key: str, default: int | None = None) -> int:
        value = raw.get(key, default)
        if isinstance(value, str) and value.lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise FlightRecorderError(path, f"{where}: {key} is missing or not an integer ({value!r})")
        return value

    def optional_integer(key: str) -> int | None:
        value = raw.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    group = raw.get("process_group")
    if not (isinstance(group, (list, tuple)) and len(group) == 2 and all(isinstance(part, str) for part in group)):
        raise FlightRecorderError(path, f"{where}: process_group is missing or not (name, description)")
    name = raw.get("profiling_name")
    if not isinstance(name, str):
        raise FlightRecorderError(path, f"{where}: profiling_name is missing")
    state = raw.get("state")
    if state not in ("scheduled", "started", "completed"):
        raise FlightRecorderError(path, f"{where}: state {state!r} is not scheduled, started or completed")
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
        input_sizes=_sizes(path, where, raw.get("input_sizes", [])),
        input_dtypes=_dtypes(raw.get("input_dtypes")),
        output_sizes=_sizes(path, where, raw.get("output_sizes", [])),
        output_dtypes=_dtypes(raw.get("output_dtypes")),
        state=state,
        is_p2p=is_p2p,
        retired=retired if isinstance(retired, bool) else None,
        timeout_ms=optional_integer("timeout_ms"),
        time_created_ns=optional_integer("time_created_ns"),
        frames=_frames(raw.get("frames")),
    )


def _sizes(path: Path, where: str, value: object) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(shape, (list, tuple)) and all(isinstance(size, int) for size in shape) for shape in value
    ):
        raise FlightRecorderError(path, f"{where}: sizes are not lists of integers ({value!r})")
    return tuple(tuple(shape) for shape in value)


def _dtypes(value: object) -> tuple[str, ...]:
    return tuple(item for item in value if isinstance(item, str)) if isinstance(value, (list, tuple)) else ()


def _frames(value: object) -> tuple[Frame, ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(
        Frame(
            str(item.get("name", "?")),
            str(item.get("filename", "?")),
            item["line"] if isinstance(item.get("line"), int) else 0,
        )
        for item in value
        if isinstance(item, dict)
    )


def _groups(path: Path, value: object) -> tuple[GroupConfig, ...]:
    if not isinstance(value, dict):
        return ()
    groups = []
    for row in value.values():
        if not isinstance(row, dict) or not row.get("name"):
            continue  # gloo dumps hold one empty row {"": {"name": "", "desc": "", "ranks": "[]"}}
        text = str(row.get("ranks", "[]")).strip()
        if not (text.startswith("[") and text.endswith("]")):
            raise FlightRecorderError(path, f"pg_config ranks of group {row['name']!r} are not a list: {text!r}")
        parts = [part.strip() for part in text[1:-1].split(",") if part.strip()]
        if not all(part.isdigit() for part in parts):
            raise FlightRecorderError(path, f"pg_config ranks of group {row['name']!r} are not integers: {text!r}")
        groups.append(GroupConfig(str(row["name"]), str(row.get("desc", "")), tuple(int(part) for part in parts)))
    return tuple(groups)


def _status(value: object) -> dict[str, dict[str, int]]:
    if not isinstance(value, dict):
        return {}
    status: dict[str, dict[str, int]] = {}
    for key, row in value.items():
        if isinstance(row, dict):  # JSON dumps write the numbers as strings
            status[str(key)] = {
                str(name): int(number)
                for name, number in row.items()
                if isinstance(number, int) or (isinstance(number, str) and number.lstrip("-").isdigit())
            }
    return status
