"""Diagnosing a hung job from its flight-recorder dumps, without a model.

``diagnose`` takes every rank's dump (read by ``lockstep.traces.flight_recorder``) and, per process
group, lines up the collectives each rank posted by their per-group sequence ids: the first position
where the ranks disagree (a different op, different sizes or dtypes, an op a member never posted),
who waits where, and the Python frames of each waiting rank. Groups are keyed by name; a group torch
did not register (vLLM's DP group) has no name and is keyed by its ``pg_id`` and labelled by its
members and op pattern. Members come from ``pg_config`` (NCCL records them) or else from the dumps
that posted on the group (gloo records none).

What a dump can say about completion depends on the backend: NCCL entries move from "scheduled"
to "completed", so an op not completed is pending; gloo entries stay "scheduled" (torch 2.11 to 2.13),
so only order and sequence ids are usable, and a gloo rank's last entry is taken as where it waits.
Gloo records no members either: a gloo group only one rank posted on has nothing to be compared
with, so it is ``inconclusive`` (exit 3), never ``consistent``, and so is a diagnosis whose groups
agree only where nothing could be compared.
Send/recv ops are paired per channel (``match_transfers``, below): a send without its recv, a
recv without its send, or a pair of different sizes or dtypes is reported, and a pending NCCL
send or recv is a wait like a pending collective. Every step is linear in the entries (or n log n),
whatever the dumps hold: the entries are bucketed by group and rank once, and sequence ids are
walked as the ones present, never as a range. Values only: ``render`` in
``lockstep.cli.flight_recorder_report`` makes text.

Send/recv matching: NCCL records every single send and recv as an entry of its own, with a per-group p2p sequence id
and a profiling name naming both ends in *group* ranks: ``nccl:send 0->1`` on the sender,
``nccl:recv 1<-0`` on the receiver (``ProcessGroupNCCL`` names them so; a ``batch_isend_irecv``
shares one sequence id between its ops, which are matched one by one all the same). NCCL pairs the
point-to-point ops of one channel (source, destination) in the order they are posted, so the k-th
send from ``s`` to ``d`` is paired here with the k-th recv of ``d`` from ``s``. A pair whose
tensors differ in size or dtype is a desync; a send whose receiver dumped and posted no matching
recv (or the converse) is a missing op: its poster waits, or with NCCL a small send may have
completed into the receiver's buffer although the recv never came. A channel with an end whose
dump is missing or whose ring buffer wrapped is not paired (its order is unknown); a note says so.
Gloo records no send/recv (torch 2.11 to 2.13), so this concerns NCCL dumps. Values only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lockstep.traces.flight_recorder import (
    FlightRecorderDirectory,
    FlightRecorderEntry,
    Frame,
    RankDump,
    read_directory,
)

Verdict = Literal["consistent", "inconclusive", "hang", "desync"]
EXIT_CODES: dict[str, int] = {"consistent": 0, "inconclusive": 3, "hang": 1, "desync": 1}
# Ops whose members must all pass equal input sizes (output sizes for the reduce-scatters).
EQUAL_INPUT_OPERATIONS = frozenset(
    {
        "all_reduce",
        "allreduce",
        "allreduce_coalesced",
        "all_reduce_barrier",
        "broadcast",
        "_broadcast_oop",
        "reduce",
        "_reduce_oop",
        "all_gather",
        "_all_gather_base",
        "all_gather_into_tensor",
        "all_gather_into_tensor_coalesced",
        "barrier",
    }
)
EQUAL_OUTPUT_OPERATIONS = frozenset({"reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced"})
Reason = Literal["different operations", "different sizes", "different dtypes", "missing operation"]


@dataclass(frozen=True)
class PostedOperation:
    """One op one rank posted on one group: one entry, or several sharing a sequence id (coalesced)."""

    rank: int
    sequence: int  # collective_seq_id, or p2p_seq_id for a p2p op
    entries: tuple[FlightRecorderEntry, ...]

    @property
    def operation(self) -> str:
        names = [entry.operation for entry in self.entries]
        return names[0] if len(set(names)) == 1 and len(names) == 1 else "coalesced(" + "+".join(names) + ")"

    @property
    def is_p2p(self) -> bool:
        return self.entries[0].is_p2p

    @property
    def state(self) -> str:
        states = {entry.state for entry in self.entries}
        return "completed" if states == {"completed"} else "started" if "started" in states else "scheduled"

    @property
    def frames(self) -> tuple[Frame, ...]:
        return self.entries[0].frames

    def describe(self) -> str:
        entry = self.entries[0]
        sizes = " ".join(str([list(shape) for shape in entry.input_sizes]).split()) if entry.input_sizes else ""
        dtypes = ",".join(entry.input_dtypes)
        peers = entry.profiling_name.partition(" ")[2] if self.is_p2p and len(self.entries) == 1 else ""
        name = f"{self.operation} {peers}" if peers else self.operation  # send 0->1: group ranks
        return " ".join(part for part in (f"{name}#{self.sequence}", sizes, dtypes) if part)


@dataclass(frozen=True)
class Disagreement:
    """The first position of a group where its members' posted ops differ."""

    sequence: int
    reason: Reason
    posted: tuple[PostedOperation, ...]
    absent: tuple[int, ...]  # members with a dump that posted nothing at this position


@dataclass(frozen=True)
class Wait:
    """Where one rank is blocked: an op it posted that cannot complete (or has not)."""

    rank: int
    group_key: str
    group_label: str
    posted: PostedOperation

    def describe(self) -> str:
        entry = self.posted.entries[0]
        peers = entry.profiling_name.partition(" ")[2] if self.posted.is_p2p and len(self.posted.entries) == 1 else ""
        name = f"{self.posted.operation} {peers}" if peers else self.posted.operation
        return f"{name}#{self.posted.sequence} of {self.group_label}"


@dataclass(frozen=True)
class GroupDiagnosis:
    """One process group across the ranks that dumped."""

    key: str  # the group name, or "pg_id N" for an unnamed group
    label: str
    description: str
    members: tuple[int, ...]
    members_source: Literal["pg_config", "dumps"]
    backend: str
    pattern: str  # the op pattern: "all_reduce×3 barrier×1"
    operations: dict[int, tuple[PostedOperation, ...]]  # per rank, in sequence order, p2p included
    disagreement: Disagreement | None
    waits: tuple[Wait, ...]
    verdict: Verdict
    notes: tuple[str, ...]
    transfers: tuple[Transfer, ...] = ()  # every send paired with its recv (NCCL; gloo records none)


@dataclass(frozen=True)
class RankPosition:
    """Where one rank is, over all its groups: the op it waits in, or None when all it posted completed."""

    rank: int
    wait: Wait | None
    known: bool  # False for gloo: taken from the rank's last entry, completion is not recorded


@dataclass(frozen=True)
class Diagnosis:
    """Everything the dumps of one directory say, with no model: per group, per rank, and a verdict."""

    directory: Path
    ranks: tuple[int, ...]
    versions: tuple[str, ...]
    encodings: tuple[str, ...]
    groups: tuple[GroupDiagnosis, ...]
    positions: tuple[RankPosition, ...]
    verdict: Verdict
    summary: str  # "ranks 0,2 in all_reduce#3 of ...; rank 1 in barrier#3 of ..."
    warnings: tuple[str, ...]
    folders: tuple[Path, ...] = ()  # read besides ``directory`` (a run's nccl/)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]


def diagnose_directory(path: str | Path) -> Diagnosis:
    """Read every rank's dump in ``path`` and diagnose them (raises ``FlightRecorderError`` if unreadable)."""
    return diagnose(read_directory(path))


@dataclass(frozen=True)
class _Ranks:
    """What every group's diagnosis asks of the directory, computed once."""

    dumped: frozenset[int]  # ranks with a dump
    wrapped: frozenset[int]  # ranks whose ring buffer lost entries
    configured: dict[str, tuple[int, ...]]  # group name -> pg_config ranks (the first dump that names any)


def diagnose(directory: FlightRecorderDirectory) -> Diagnosis:
    """Line up every group's ops across the ranks and say who waits where."""
    keyed: dict[str, dict[int, list[FlightRecorderEntry]]] = {}  # group key -> rank -> its entries there
    first_seen: dict[str, int] = {}
    configured: dict[str, tuple[int, ...]] = {}
    for dump in directory.dumps:
        for entry in dump.entries:
            key = group_key(entry)
            keyed.setdefault(key, {}).setdefault(dump.rank, []).append(entry)
            first_seen.setdefault(key, entry.group_index)
        for config in dump.groups:
            if config.name and config.ranks:
                configured.setdefault(config.name, config.ranks)
    ranks = _Ranks(
        frozenset(directory.ranks), frozenset(dump.rank for dump in directory.dumps if dump.wrapped), configured
    )
    ordered = sorted(keyed, key=lambda key: (first_seen[key], key))
    groups = tuple(_diagnose_group(key, keyed[key], ranks) for key in ordered)
    waits: dict[int, list[Wait]] = {}
    for group in groups:
        for wait in group.waits:
            waits.setdefault(wait.rank, []).append(wait)
    by_key = {group.key: group for group in groups}
    positions = tuple(_position(dump, by_key, waits.get(dump.rank, [])) for dump in directory.dumps)
    verdicts = {group.verdict for group in groups}
    ranked: tuple[Verdict, ...] = ("desync", "hang", "inconclusive")  # the first a group has decides
    verdict: Verdict = next((each for each in ranked if each in verdicts), "consistent")
    summary = _summary(positions) if verdict != "consistent" else ""
    if verdict == "inconclusive":
        uncompared = [group.label for group in groups if group.verdict == "inconclusive"]
        summary = (
            f"nothing to compare on {', '.join(uncompared)} (one rank posted on each, and its backend records "
            f"neither members nor completion), and no group shows a disagreement; {summary}"
        )
    return Diagnosis(
        directory.path,
        directory.ranks,
        tuple(sorted({dump.version for dump in directory.dumps})),
        tuple(sorted({dump.encoding for dump in directory.dumps})),
        groups,
        positions,
        verdict,
        summary,
        directory.warnings,
        directory.folders,
    )


def group_key(entry: FlightRecorderEntry) -> str:
    return entry.group_name if entry.group_name else f"pg_id {entry.group_index}"


def ranks_text(ranks: Iterable[int]) -> str:
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(str(rank) for rank in ranks)


def _diagnose_group(key: str, entries: dict[int, list[FlightRecorderEntry]], ranks: _Ranks) -> GroupDiagnosis:
    """One group; ``entries``: per rank that posted on it (in rank order), its entries there."""
    first = next(iter(entries.values()))[0]
    configured = ranks.configured.get(first.group_name, ()) if first.group_name else ()
    members = configured or tuple(sorted(entries))
    backend = first.backend or "unknown"
    counts: Counter[str] = Counter()
    for found in entries.values():  # the most any one rank posted of each op, in order of first appearance
        counts |= Counter(entry.operation for entry in found)
    pattern = " ".join(f"{name}×{count}" for name, count in counts.items())
    if first.group_name:
        described = first.group_description not in ("", "undefined")
        label = f"group {first.group_name}" + (f" ({first.group_description})" if described else "")
    else:
        label = f"unnamed group (pg_id {first.group_index})"
    notes = []
    if not configured:
        notes.append(f"{backend} records no members: taken from the dumps that posted on it ({ranks_text(members)})")
    without_dump = sorted(set(members) - ranks.dumped)
    if without_dump:
        notes.append(f"no dump for {ranks_text(without_dump)}: where they are is unknown")
    silent = sorted(set(members) - set(entries) - set(without_dump))
    if silent:
        notes.append(f"{ranks_text(silent)} posted nothing on it (or the ring buffer lost it)")
    operations: dict[int, tuple[PostedOperation, ...]] = {}
    collectives: dict[int, dict[int, PostedOperation]] = {}
    for rank, found in entries.items():
        by_sequence: dict[tuple[bool, int], list[FlightRecorderEntry]] = {}
        for entry in found:
            sequence = entry.p2p_sequence if entry.is_p2p else entry.collective_sequence
            by_sequence.setdefault((entry.is_p2p, sequence), []).append(entry)
        posted = [PostedOperation(rank, sequence, tuple(group)) for (_, sequence), group in by_sequence.items()]
        operations[rank] = tuple(posted)
        collectives[rank] = {item.sequence: item for item in posted if not item.is_p2p}
        notes.extend(_losses(rank, sorted(collectives[rank])))
    transfers, transfer_notes = match_transfers(operations, members, ranks.dumped, ranks.wrapped)
    if transfers:
        notes.append(f"point-to-point: {summarise(transfers)}")
    notes.extend(transfer_notes)
    tracks_completion = backend != "gloo"
    if not tracks_completion:
        notes.append('gloo records no completion (entries stay "scheduled"): only order and sequence ids are used')
    disagreement = _first_disagreement(collectives, [rank for rank in members if rank in ranks.dumped])
    waits: list[Wait] = []
    if disagreement is not None:
        waits = [Wait(item.rank, key, label, item) for item in disagreement.posted]
    elif tracks_completion:
        for rank, own in operations.items():  # the oldest op not completed, collective or p2p
            pending = [item for item in own if item.state != "completed"]
            if pending:
                waits.append(Wait(rank, key, label, min(pending, key=lambda item: item.entries[0].record_id)))
    unmatched = [transfer for transfer in transfers if transfer.problem in ("send without recv", "recv without send")]
    if not tracks_completion:  # no completion recorded: a send or recv without its partner is where its rank waits
        waiting = {wait.rank for wait in waits}
        for transfer in unmatched:
            side = transfer.send or transfer.recv
            if side is not None and side.rank not in waiting:
                waits.append(Wait(side.rank, key, label, side))
                waiting.add(side.rank)
    verdict: Verdict = "consistent"
    if disagreement is not None:
        verdict = "hang" if disagreement.reason == "missing operation" else "desync"
    elif any(transfer.problem in ("different sizes", "different dtypes") for transfer in transfers):
        verdict = "desync"
    elif unmatched:
        verdict = "hang"
    elif waits:
        verdict = "hang"
        notes.append("every member posted the pending op; it did not complete")
    elif not tracks_completion and len(entries) < 2 and (not configured or len(configured) > 1):
        verdict = "inconclusive"  # one poster, and nothing says whether the others posted the same
        whom = "which ranks belong to it and " if not configured else ""
        notes.append(
            f"nothing to compare: only {ranks_text(entries)} posted on it, and {backend} records neither "
            f"members nor completion: {whom}whether its other members posted these ops is unknown"
        )
    return GroupDiagnosis(
        key,
        label,
        first.group_description,
        tuple(members),
        "pg_config" if configured else "dumps",
        backend,
        pattern,
        operations,
        disagreement,
        tuple(waits),
        verdict,
        tuple(notes),
        transfers,
    )


def _losses(rank: int, sequences: list[int]) -> list[str]:
    notes = []
    if sequences and sequences[0] > 1:
        notes.append(
            f"rank {rank}'s entries start at #{sequences[0]}: #1 to #{sequences[0] - 1} were lost "
            "from the ring buffer (it wrapped)"
        )
    gaps = [(before, after) for before, after in zip(sequences, sequences[1:]) if after > before + 1]
    for before, after in gaps:
        notes.append(f"rank {rank} has no entries from #{before + 1} to #{after - 1}")
    return notes


def _signature(item: PostedOperation) -> tuple[tuple[str, tuple[object, ...], tuple[str, ...]], ...]:
    signature = []
    for entry in item.entries:
        sizes: tuple[object, ...] = ()
        if entry.operation in EQUAL_INPUT_OPERATIONS:
            sizes = entry.input_sizes
        elif entry.operation in EQUAL_OUTPUT_OPERATIONS:
            sizes = entry.output_sizes
        signature.append((entry.operation, sizes, entry.input_dtypes))
    return tuple(signature)


def _first_disagreement(collectives: dict[int, dict[int, PostedOperation]], members: list[int]) -> Disagreement | None:
    """The first sequence id, from where every member's entries start, whose posted ops differ or
    that a member's entries end before (a member with none is absent from the first). Walks the ids
    present, in order: linear in the ops however far apart the ids are."""
    known = {rank: collectives.get(rank, {}) for rank in members}
    starts = [min(by_sequence) for by_sequence in known.values() if by_sequence]
    if not starts:
        return None
    start = max(starts)
    ends = {rank: max(by_sequence) for rank, by_sequence in known.items() if by_sequence}
    earliest_end = min(ends.values()) if len(ends) == len(known) else None  # None: a member posted nothing
    at: dict[int, list[PostedOperation]] = {}
    for rank in members:
        for sequence, item in known[rank].items():
            if sequence >= start:
                at.setdefault(sequence, []).append(item)

    def found(sequence: int, reason: Reason) -> Disagreement:
        absent = tuple(
            rank for rank in members if sequence not in known[rank] and (rank not in ends or sequence > ends[rank])
        )
        return Disagreement(sequence, reason, tuple(at[sequence]), absent)

    for sequence in sorted(at):
        signatures = [_signature(item) for item in at[sequence]]
        if len({tuple(name for name, _, _ in signature) for signature in signatures}) > 1:
            return found(sequence, "different operations")
        if len({tuple(sizes for _, sizes, _ in signature) for signature in signatures}) > 1:
            return found(sequence, "different sizes")
        if len({tuple(dtypes for _, _, dtypes in signature) for signature in signatures}) > 1:
            return found(sequence, "different dtypes")
        if earliest_end is None or sequence > earliest_end:
            return found(sequence, "missing operation")
    return None


def _position(dump: RankDump, groups: dict[str, GroupDiagnosis], waits: list[Wait]) -> RankPosition:
    """Where ``dump``'s rank is: the first of its ``waits`` in the order it posted them, else (gloo)
    its last entry's op."""
    if waits:
        order = {id(entry): index for index, entry in enumerate(dump.entries)}
        return RankPosition(dump.rank, min(waits, key=lambda wait: order[id(wait.posted.entries[0])]), True)
    if not dump.entries:
        return RankPosition(dump.rank, None, True)
    last = dump.entries[-1]
    if last.backend == "gloo":  # completion unknown: the last op posted is where a blocked rank sits
        group = groups[group_key(last)]
        posted = next(item for item in group.operations[dump.rank] if any(entry is last for entry in item.entries))
        return RankPosition(dump.rank, Wait(dump.rank, group.key, group.label, posted), False)
    return RankPosition(dump.rank, None, True)


def _summary(positions: tuple[RankPosition, ...]) -> str:
    places: dict[str, list[int]] = {}
    for position in positions:
        if position.wait is None:
            place = ": nothing pending"
        else:
            place = (" in " if position.known else " last posted ") + position.wait.describe()
        places.setdefault(place, []).append(position.rank)
    return "; ".join(f"{ranks_text(ranks)}{place}" for place, ranks in places.items())


TransferProblem = Literal["", "send without recv", "recv without send", "different sizes", "different dtypes"]


@dataclass(frozen=True)
class Transfer:
    """The k-th transfer of one channel: a send and its recv, or the side that has no partner."""

    source: int  # global ranks
    destination: int
    number: int  # 1, 2, ... on this channel
    send: PostedOperation | None
    recv: PostedOperation | None
    problem: TransferProblem  # "" when the send and the recv match

    @property
    def matched(self) -> bool:
        return not self.problem

    def describe(self) -> str:
        sides = [f"rank {side.rank}: {side.describe()} ({side.state})" for side in (self.send, self.recv) if side]
        where = f"transfer {self.number} from rank {self.source} to rank {self.destination}"
        missing = {"send without recv": f"; rank {self.destination} posted no matching recv"}.get(self.problem, "")
        if self.problem == "recv without send":
            missing = f"; rank {self.source} posted no matching send"
        return f"{where}: {'; '.join(sides)}{missing}"


def endpoints(entry: FlightRecorderEntry) -> tuple[int, int] | None:
    """(source, destination) group ranks of a send or recv entry, from its profiling name."""
    parts = entry.profiling_name.partition(":")[2].split(" ")
    if len(parts) != 2 or entry.operation not in ("send", "recv"):
        return None
    arrow = "->" if "->" in parts[1] else "<-" if "<-" in parts[1] else None
    if arrow is None:
        return None
    left, _, right = parts[1].partition(arrow)
    if not (left.isdigit() and right.isdigit()):
        return None
    return (int(left), int(right)) if arrow == "->" else (int(right), int(left))


def match_transfers(
    operations: Mapping[int, Sequence[PostedOperation]],
    members: Sequence[int],
    dumped: Collection[int],
    wrapped: Collection[int] = (),
) -> tuple[tuple[Transfer, ...], tuple[str, ...]]:
    """Pair every send with its recv on one group. ``operations``: per global rank, its posted ops
    on the group; ``members``: the group's global ranks in group-rank order (group rank i is
    ``members[i]``; the global rank itself where the group's members are unknown); ``dumped``:
    the ranks with a dump; ``wrapped``: ranks whose ring buffer lost entries. Returns the
    transfers (channel by channel) and notes on what could not be paired."""

    def global_rank(group_rank: int) -> int:
        return members[group_rank] if 0 <= group_rank < len(members) else group_rank

    sends: dict[tuple[int, int], list[PostedOperation]] = {}
    recvs: dict[tuple[int, int], list[PostedOperation]] = {}
    for rank, posted in sorted(operations.items()):
        for item in posted:
            if not item.is_p2p:
                continue
            for entry in item.entries:  # a batch's ops share a sequence id: pair them one by one
                ends = endpoints(entry)
                if ends is None:
                    continue
                channel = (global_rank(ends[0]), global_rank(ends[1]))
                single = PostedOperation(rank, item.sequence, (entry,))
                (sends if entry.operation == "send" else recvs).setdefault(channel, []).append(single)
    transfers: list[Transfer] = []
    notes: list[str] = []
    for source, destination in sorted(set(sends) | set(recvs)):
        sent, received = sends.get((source, destination), []), recvs.get((source, destination), [])
        unknown = [rank for rank in (source, destination) if rank not in dumped]
        if unknown:
            notes.append(
                f"send/recv from rank {source} to rank {destination} not paired: no dump for rank {unknown[0]}"
            )
            continue
        lossy = [rank for rank in (source, destination) if rank in wrapped]
        if lossy:
            notes.append(
                f"send/recv from rank {source} to rank {destination} not paired: rank {lossy[0]}'s ring buffer "
                "wrapped, so which send goes with which recv is unknown"
            )
            continue
        for index in range(max(len(sent), len(received))):
            send = sent[index] if index < len(sent) else None
            recv = received[index] if index < len(received) else None
            transfers.append(Transfer(source, destination, index + 1, send, recv, _problem(send, recv)))
    return tuple(transfers), tuple(notes)


def _problem(send: PostedOperation | None, recv: PostedOperation | None) -> TransferProblem:
    if recv is None:
        return "send without recv"
    if send is None:
        return "recv without send"
    sent, received = send.entries[0], recv.entries[0]
    if sent.input_sizes != received.input_sizes:
        return "different sizes"
    if sent.input_dtypes != received.input_dtypes:
        return "different dtypes"
    return ""


def summarise(transfers: Sequence[Transfer]) -> str:
    """``4 send/recv pairs matched`` or ``2 matched, 1 send without recv``."""
    problems: dict[str, int] = {}
    for transfer in transfers:
        if transfer.problem:
            problems[transfer.problem] = problems.get(transfer.problem, 0) + 1
    matched = sum(1 for transfer in transfers if transfer.matched)
    if not problems:
        return f"{matched} send/recv pair{'s' if matched != 1 else ''} matched (every send has its recv)"
    return ", ".join([f"{matched} matched", *(f"{count} {problem}" for problem, count in problems.items())])
