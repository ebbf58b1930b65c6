"""Which dump group is which model communicator, and the per-(rank, communicator) op sequences a
model execution must project onto (``lockstep.checkers.flight_recorder.model_check`` searches).

A mapping file is JSON: ``{"groups": {"<group name or pg_id N>": "<communicator>" or null},
"acknowledged": ["<communicator>", ...], "runtime_only": ["<name>", ...]}`` (``lockstep run
--flight-recorder`` writes one as ``flight-recorder-mapping.json`` beside the dumps, with the
``"protocol"`` it ran: ``find_mapping`` finds it there; other keys are ignored). A
group mapped to null is left out (with a note). A group mapped to a name that is no communicator
of the model is refused (``FlightRecorderError`` naming the file and the entry: exit 2) unless
``runtime_only`` declares the name: a group the runtime keeps for its own plumbing (the
reference runtime's ``pp_cpu`` carries the transfers' metadata), left out with a note.
``acknowledged`` names communicators whose every transfer is answered by a one-element message
back (the runtime's ``Collective.send``/``recv`` rendezvous ack): those acks are dropped from the
sequences.

Without a file the mapping is guessed: a group may be a communicator whose members can be its
ranks (``pg_config`` ranks for NCCL; gloo records none) and which offers every kind of op the
group shows; the default group (``default_pg``) is left out. Guesses are ordered best first: more
groups mapped, then groups whose creation order (``pg_id``) is the communicators' declaration
order, then any other; at most ``MAX_GUESSES`` are tried, chosen among at most
``MAX_COMBINATIONS`` assignments (a note says when there were more). Member m of a communicator is
the group's rank m (the global rank when the dump names no ranks). Ops lost from a wrapped ring
buffer are counted, not stored (``ProjectedSequence``): a sequence id of 2**62 costs nothing.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import overload

from lockstep.checkers.flight_recorder.diagnosis import group_key
from lockstep.spec.collectives import Communicator, Kind
from lockstep.spec.machine import Machine
from lockstep.traces.flight_recorder import (
    MAPPING_FILE,
    NCCL_FOLDER,
    FlightRecorderDirectory,
    FlightRecorderEntry,
    FlightRecorderError,
    decimal,
    load_json,
    read_bounded,
)

MAX_GUESSES = 24
MAX_COMBINATIONS = 100_000  # assignments of groups to communicators looked at by the automatic mapping
MAX_MAPPING_BYTES = 16 * 1024 * 1024
FAMILIES = {
    Kind.ALL_REDUCE_SUM: "all_reduce",
    Kind.ALL_REDUCE_MAX: "all_reduce",
    Kind.BARRIER: "barrier",
    Kind.BROADCAST: "broadcast",
    Kind.SEND: "send",
    Kind.RECV: "recv",
}
_DUMP_FAMILIES = {
    "all_reduce": "all_reduce",
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce",
    "barrier": "barrier",
    "all_reduce_barrier": "barrier",
    "broadcast": "broadcast",
    "_broadcast_oop": "broadcast",
    "send": "send",
    "recv": "recv",
}


@dataclass(frozen=True)
class DecodedOperation:
    """An op a model step posted: its family, the peer of a send/recv, and the model's op name."""

    family: str
    peer: int | None
    name: str


@dataclass(frozen=True)
class ObservedOperation:
    """One op of one rank's dump on one group; ``family`` None: lost from the ring buffer (any op)."""

    sequence: int
    family: str | None
    peer: int | None
    text: str

    def admits(self, operation: DecodedOperation) -> bool:
        if self.family is None:
            return True
        return self.family == operation.family and (self.peer is None or self.peer == operation.peer)

    def describe(self) -> str:
        return self.text


class ProjectedSequence:
    """One rank's ops on one communicator as a model execution must post them: ``lost`` ops that a
    wrapped ring buffer lost (any op each, not stored), then the observed ``operations``."""

    def __init__(self, lost: int, operations: tuple[ObservedOperation, ...]) -> None:
        self.lost, self.operations = lost, operations

    def __len__(self) -> int:
        return self.lost + len(self.operations)

    @overload
    def __getitem__(self, index: int) -> ObservedOperation: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[ObservedOperation, ...]: ...

    def __getitem__(self, index: int | slice) -> ObservedOperation | tuple[ObservedOperation, ...]:
        if isinstance(index, slice):
            return tuple(self[position] for position in range(*index.indices(len(self))))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return (
            ObservedOperation(index + 1, None, None, "(lost)")
            if index < self.lost
            else self.operations[index - self.lost]
        )


@dataclass
class ProjectionPlan:
    """One mapping, and the dump sequences a model execution must project onto."""

    mapping: dict[str, str]  # group key -> communicator name
    communicators: tuple[Communicator, ...]  # mapped, in index order
    all_communicators: tuple[Communicator, ...]
    sequences: dict[tuple[int, int], ProjectedSequence]  # (member, communicator index)
    point_to_point_recorded: tuple[bool, ...]
    notes: list[str] = field(default_factory=list)

    @property
    def keys(self) -> list[tuple[int, int]]:
        return list(self.sequences)

    @property
    def group_of(self) -> dict[str, str]:
        return {communicator: group for group, communicator in self.mapping.items()}

    def decode(self, index: int, posted: object) -> DecodedOperation:
        communicator = self.communicators[index]
        assert isinstance(posted, tuple)
        op_position, peer = posted[0], posted[1]
        assert isinstance(op_position, int) and isinstance(peer, int)
        name = communicator.op_sort.members[op_position]
        kind = communicator.specs[name].kind
        return DecodedOperation(FAMILIES[kind], peer if kind in (Kind.SEND, Kind.RECV) else None, name)

    def observed(self, index: int, operation: DecodedOperation) -> bool:
        return operation.family not in ("send", "recv") or self.point_to_point_recorded[index]


def describe_posted(plan: ProjectionPlan, index: int, operation: DecodedOperation) -> str:
    name = plan.communicators[index].name
    if operation.family == "send":
        return f"send->{operation.peer}({name})"
    if operation.family == "recv":
        return f"recv<-{operation.peer}({name})"
    return f"{operation.name}({name}) [{operation.family}]"


@dataclass(frozen=True)
class MappingFile:
    """A mapping file as read: groups to communicators, acknowledged communicators, runtime-only groups."""

    path: Path
    groups: dict[str, str | None]
    acknowledged: tuple[str, ...]
    runtime_only: tuple[str, ...]
    protocol: str | None = None  # the protocol the run that wrote it ran, where it says


def find_mapping(dumps: str | Path) -> Path | None:
    """The mapping file ``lockstep run --flight-recorder`` wrote beside ``dumps`` (a directory, its
    ``nccl/`` folder, or one dump file), or None."""
    dumps = Path(dumps)
    folder = dumps if dumps.is_dir() else dumps.parent
    for candidate in (folder, folder.parent) if folder.name in (NCCL_FOLDER, "nccl-timeout") else (folder,):
        if (candidate / MAPPING_FILE).is_file():
            return candidate / MAPPING_FILE
    return None


def read_mapping(path: str | Path) -> MappingFile:
    """A mapping file's groups, acknowledged communicators and runtime-only group names
    (``FlightRecorderError`` if unreadable)."""
    path = Path(path)
    document = load_json(read_bounded(path, MAX_MAPPING_BYTES), path)
    if not isinstance(document, dict):
        document = {}
    groups = document.get("groups")
    if not isinstance(groups, dict) or not all(
        isinstance(key, str) and (value is None or isinstance(value, str)) for key, value in groups.items()
    ):
        raise FlightRecorderError(path, 'expected {"groups": {"<group name or pg_id N>": "<communicator>" or null}}')
    acknowledged = document.get("acknowledged", [])
    if not isinstance(acknowledged, list) or not all(isinstance(name, str) for name in acknowledged):
        raise FlightRecorderError(path, '"acknowledged" must be a list of communicator names')
    runtime_only = document.get("runtime_only", [])
    if not isinstance(runtime_only, list) or not all(isinstance(name, str) for name in runtime_only):
        raise FlightRecorderError(path, '"runtime_only" must be a list of group names')
    protocol = document.get("protocol")
    return MappingFile(
        path, dict(groups), tuple(acknowledged), tuple(runtime_only), protocol if isinstance(protocol, str) else None
    )


def plan_projection(
    directory: FlightRecorderDirectory,
    machine: Machine,
    mapping: Mapping[str, str | None] | None,
    acknowledged: tuple[str, ...] = (),
    runtime_only: tuple[str, ...] = (),
    mapping_file: str | Path | None = None,
) -> list[ProjectionPlan]:
    """The plans to try: the given mapping's, or the guesses' (best first; at least one). A given
    mapping's entry naming no communicator of the model, and not declared ``runtime_only``, raises
    ``FlightRecorderError`` naming ``mapping_file`` (or "the mapping") and the entry."""
    communicators = tuple(item for item in machine.communicators if isinstance(item, Communicator))
    entries: dict[str, list[FlightRecorderEntry]] = {}
    own: dict[tuple[int, str], list[FlightRecorderEntry]] = {}  # (rank, group key) -> its entries there
    for dump in directory.dumps:
        for entry in dump.entries:
            entries.setdefault(group_key(entry), []).append(entry)
            own.setdefault((dump.rank, group_key(entry)), []).append(entry)
    names = {communicator.name: communicator for communicator in communicators}
    if mapping is not None:
        notes = []
        chosen: dict[str, str] = {}
        for key, name in mapping.items():
            if name is not None and name not in names and name not in runtime_only:
                known = ", ".join(names) or "none"
                raise FlightRecorderError(
                    mapping_file or "the mapping",
                    f'entry "{key}": "{name}" is no communicator of the model (its communicators: {known}) '
                    'and not declared a runtime-only group ("runtime_only": [...])',
                )
            if name is not None and name not in names:
                notes.append(f"mapping: group {key!r} -> {name!r} is a runtime-only group (no model communicator)")
            elif key not in entries:
                notes.append(f"mapping: group {key!r} has no entries in the dumps")
            elif name is None:
                notes.append(f"mapping: group {key!r} left out")
            else:
                chosen[key] = name
        guesses = [chosen]
    else:
        guesses, notes = _guesses(directory, entries, communicators)
    plans = []
    for guess in guesses:
        plan = _plan(directory, entries, own, communicators, guess, acknowledged)
        plan.notes[:0] = notes
        unmapped = sorted(set(entries) - set(guess))
        if unmapped:
            plan.notes.append(f"groups not checked against the model: {', '.join(unmapped)}")
        plans.append(plan)
    return plans


def _family(entry: FlightRecorderEntry) -> str:
    return _DUMP_FAMILIES.get(entry.operation, entry.operation)


def _members(directory: FlightRecorderDirectory, key: str, found: list[FlightRecorderEntry]) -> tuple[int, ...]:
    name = found[0].group_name
    for dump in directory.dumps:
        if name and dump.members_of(name):
            return dump.members_of(name)
    return ()


def _guesses(
    directory: FlightRecorderDirectory,
    entries: dict[str, list[FlightRecorderEntry]],
    communicators: tuple[Communicator, ...],
) -> tuple[list[dict[str, str]], list[str]]:
    notes = []
    candidates: dict[str, list[str]] = {}
    posters: dict[str, set[int]] = {}
    for dump in directory.dumps:
        for entry in dump.entries:
            posters.setdefault(group_key(entry), set()).add(dump.rank)
    order = sorted(entries, key=lambda key: (entries[key][0].group_index, key))
    for key in order:
        found = entries[key]
        if found[0].group_description == "default_pg":
            notes.append(f"group {key} (default_pg) left out of the automatic mapping")
            continue
        members = _members(directory, key, found)
        ranks = posters[key]
        families = {_family(entry) for entry in found}
        fitting = []
        for communicator in communicators:
            count = communicator.members.count
            if members and len(members) != count:
                continue
            if not members and any(rank >= count for rank in ranks):
                continue
            offered = {FAMILIES[spec.kind] for spec in communicator.specs.values()}
            if families <= offered:
                fitting.append(communicator.name)
        if fitting:
            candidates[key] = fitting
        else:
            notes.append(f"group {key}: no communicator of the model offers {', '.join(sorted(families))}")
    keys = list(candidates)
    declared = [communicator.name for communicator in communicators]
    scored: list[tuple[tuple[int, int, int], dict[str, str]]] = []
    options = [[*candidates[key], None] for key in keys]
    combinations = math.prod(len(option) for option in options)
    if combinations > MAX_COMBINATIONS:
        notes.append(
            f"the automatic mapping looked at {MAX_COMBINATIONS} of {combinations} ways to map the groups to "
            "communicators: give --mapping FILE if its guess is wrong"
        )
    for choice in itertools.islice(itertools.product(*options), MAX_COMBINATIONS):
        used = [name for name in choice if name is not None]
        if len(used) != len(set(used)):
            continue
        guess = {key: name for key, name in zip(keys, choice) if name is not None}
        aligned = sum(1 for key, name in guess.items() if entries[key][0].group_index == declared.index(name) + 1)
        indexes = [declared.index(guess[key]) for key in keys if key in guess]
        ordered = int(indexes == sorted(indexes))
        scored.append(((-len(guess), -aligned, -ordered), guess))
    scored.sort(key=lambda item: item[0])
    most = max((len(guess) for _, guess in scored), default=0)  # a guess never leaves a group out to fit
    guesses = [guess for _, guess in scored if len(guess) == most][:MAX_GUESSES] or [{}]
    return guesses, notes


def _plan(
    directory: FlightRecorderDirectory,
    entries: dict[str, list[FlightRecorderEntry]],
    own: Mapping[tuple[int, str], list[FlightRecorderEntry]],
    communicators: tuple[Communicator, ...],
    guess: Mapping[str, str],
    acknowledged: tuple[str, ...],
) -> ProjectionPlan:
    by_name = {communicator.name: communicator for communicator in communicators}
    mapped = tuple(by_name[name] for name in sorted(set(guess.values()), key=list(by_name).index))
    index_of = {communicator.name: index for index, communicator in enumerate(mapped)}
    sequences: dict[tuple[int, int], ProjectedSequence] = {}
    recorded = [True] * len(mapped)
    notes: list[str] = []
    for key, name in guess.items():
        index = index_of[name]
        found = entries[key]
        members = _members(directory, key, found)
        if found[0].backend == "gloo":
            recorded[index] = False
        for dump in directory.dumps:
            member = members.index(dump.rank) if members and dump.rank in members else dump.rank
            if members and dump.rank not in members:
                continue
            if member >= by_name[name].members.count:
                continue
            posted = own.get((dump.rank, key), [])
            sequence = _sequence(posted, name in acknowledged, recorded[index])
            lost = _lost(posted)
            if lost:
                notes.append(
                    f"rank {dump.rank}'s first {lost} ops on {key} were lost from the ring buffer: the model "
                    "check starts mid-execution (any ops there)"
                )
            sequences[(member, index)] = ProjectedSequence(lost, sequence)
    gloo = [
        communicator.name for communicator, flag in zip(mapped, recorded) if not flag and "send" in communicator.specs
    ]
    if gloo:
        notes.append(f"gloo records no send/recv (torch 2.13): p2p ops of {', '.join(gloo)} are not checked")
    return ProjectionPlan(dict(guess), mapped, communicators, sequences, tuple(recorded), notes)


def _lost(own: list[FlightRecorderEntry]) -> int:
    collectives = [entry.collective_sequence for entry in own if not entry.is_p2p]
    return min(collectives) - 1 if collectives and min(collectives) > 1 else 0


def _sequence(
    own: list[FlightRecorderEntry], acknowledged: bool, point_to_point: bool
) -> tuple[ObservedOperation, ...]:
    operations: list[ObservedOperation] = []
    seen: set[tuple[bool, int]] = set()
    answered = False  # the last op kept was a transfer whose ack has been dropped
    for entry in own:
        sequence = entry.p2p_sequence if entry.is_p2p else entry.collective_sequence
        if (entry.is_p2p, sequence) in seen:  # coalesced: one op
            continue
        seen.add((entry.is_p2p, sequence))
        family, peer = _family(entry), _peer(entry)
        if entry.is_p2p and not point_to_point:
            continue
        if acknowledged and entry.is_p2p and operations and not answered:
            previous = operations[-1]
            if family == {"send": "recv", "recv": "send"}.get(previous.family or "") and peer == previous.peer:
                answered = True
                continue
        answered = False
        operations.append(ObservedOperation(sequence, family, peer, f"{entry.profiling_name}#{sequence}"))
    return tuple(operations)


def _peer(entry: FlightRecorderEntry) -> int | None:
    parts = entry.profiling_name.partition(":")[2].split(" ")
    if len(parts) != 2:
        return None
    for arrow in ("->", "<-"):
        if arrow in parts[1]:
            return decimal(parts[1].split(arrow)[1])
    return None
