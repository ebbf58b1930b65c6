"""Send/recv matching for the model-free flight-recorder diagnosis (``lockstep.checkers.flight_recorder``).

NCCL records every single send and recv as an entry of its own, with a per-group p2p sequence id
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

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from lockstep.traces.flight_recorder import FlightRecorderEntry

if TYPE_CHECKING:
    from lockstep.checkers.flight_recorder import PostedOperation

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
    from lockstep.checkers.flight_recorder import PostedOperation

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
