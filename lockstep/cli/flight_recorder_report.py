"""The text and JSON forms of a flight-recorder ``Diagnosis``: what ``lockstep replay --flight-recorder`` shows.

``render`` (``render_model_check``: the check against a model) returns the text a person reads
(the verdict and who waits where first, then each group
with its first disagreement and the Python frames of its waiting ranks, then where each rank is);
``diagnosis_to_json`` returns plain dicts, lists, strings and numbers for ``json.dumps``. Neither prints.
Frames inside torch and the multiprocessing bootstrap are left out of the text (they are all in the JSON).
Every name in a dump (frames, groups, ops, dtypes, file names) is untrusted: each line of the text
has its control characters, escapes and bidi overrides written as Python escapes (``printable``),
so a dump cannot move the cursor or recolour the terminal; the JSON keeps them, escaped by ``json``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from lockstep.checkers.flight_recorder.diagnosis import (
    Diagnosis,
    GroupDiagnosis,
    PostedOperation,
    RankPosition,
    Wait,
    ranks_text,
)
from lockstep.traces.flight_recorder import Frame
from lockstep.traces.swimlanes import printable

if TYPE_CHECKING:
    from lockstep.checkers.flight_recorder.model_check import ModelCheck

_LIBRARY_PARTS = ("/torch/", "/multiprocessing/", "<string>", "/runpy.py", "/threading.py")


def user_frames(frames: Iterable[Frame], limit: int) -> list[Frame]:
    """The innermost ``limit`` frames outside torch and the interpreter's bootstrap."""
    return [frame for frame in frames if not any(part in frame.filename for part in _LIBRARY_PARTS)][:limit]


def render(diagnosis: Diagnosis, operations: bool = False, frames: int = 4) -> str:
    """The diagnosis as text; ``operations`` adds every op each rank posted, ``frames`` bounds each stack."""
    also = "".join(f" (and {folder})" for folder in diagnosis.folders)
    lines = [
        f"flight-recorder dumps in {diagnosis.directory}{also}: {ranks_text(diagnosis.ranks)} "
        f"({', '.join(diagnosis.encodings)}; format {', '.join(diagnosis.versions)})"
    ]
    lines += [f"warning: {warning}" for warning in diagnosis.warnings]
    headline = f"verdict: {diagnosis.verdict}"
    lines.append(headline + (f": {diagnosis.summary}" if diagnosis.summary else ": every group's ranks agree"))
    for group in diagnosis.groups:
        lines.append("")
        lines += _group_lines(group, operations, frames)
    lines += ["", "where each rank is:"]
    lines += [line for position in diagnosis.positions for line in _position_lines(position, frames)]
    return "".join(printable(line) + "\n" for line in lines)


def _group_lines(group: GroupDiagnosis, operations: bool, frames: int) -> list[str]:
    source = "from pg_config" if group.members_source == "pg_config" else "from the dumps"
    last = max((item.sequence for posted in group.operations.values() for item in posted if not item.is_p2p), default=0)
    status: str = group.verdict
    if group.verdict == "consistent":
        status = f"consistent through #{last}" if last else "consistent"
        matched = sum(1 for transfer in group.transfers if transfer.matched)
        status += f", {matched} send/recv pair{'' if matched == 1 else 's'} matched" if group.transfers else ""
    lines = [f"{group.label}: {ranks_text(group.members)} ({source}), {group.backend}, {group.pattern}: {status}"]
    unmatched = [transfer for transfer in group.transfers if not transfer.matched]
    if unmatched:
        lines.append("  send/recv without its partner or of another shape:")
        lines += [f"    {transfer.problem}: {transfer.describe()}" for transfer in unmatched]
    disagreement = group.disagreement
    if disagreement is not None:
        lines.append(f"  first disagreement at #{disagreement.sequence}: {disagreement.reason}")
        for description, ranks in _by_description(disagreement.posted).items():
            lines.append(f"    {ranks_text(ranks)}: {description}")
        for rank in disagreement.absent:
            before = [item for item in group.operations.get(rank, ()) if not item.is_p2p]
            last_here = f" (its last op here: {before[-1].describe()})" if before else ""
            lines.append(f"    rank {rank}: posted nothing{last_here}")
    if group.waits:
        lines.append("  waiting:")
        for wait in group.waits:
            lines.append(f"    rank {wait.rank} in {wait.posted.describe()} ({wait.posted.state})")
            lines += [f"      {_frame_text(frame)}" for frame in user_frames(wait.posted.frames, frames)]
    if operations:
        lines.append("  posted:")
        for rank, posted in sorted(group.operations.items()):
            listing = "; ".join(f"{item.describe()} {item.state}" for item in posted)
            lines.append(f"    rank {rank}: {listing}")
    lines += [f"  note: {note}" for note in group.notes]
    return lines


def _by_description(posted: Iterable[PostedOperation]) -> dict[str, list[int]]:
    described: dict[str, list[int]] = {}
    for item in posted:
        described.setdefault(item.describe(), []).append(item.rank)
    return described


def _position_lines(position: RankPosition, frames: int) -> list[str]:
    if position.wait is None:
        return [f"  rank {position.rank}: nothing pending (every op it posted completed)"]
    caveat = "" if position.known else " (its last op; gloo records no completion)"
    lines = [f"  rank {position.rank}: {position.wait.describe()}{caveat}"]
    return lines + [f"      {_frame_text(frame)}" for frame in user_frames(position.wait.posted.frames, frames)]


def _frame_text(frame: Frame) -> str:
    return f"{frame.filename}:{frame.line} in {frame.name}"


def diagnosis_to_json(diagnosis: Diagnosis) -> dict[str, Any]:
    """Plain data for ``json.dumps``: the verdict, warnings, groups (ops per rank, disagreement, waits), positions."""
    return {
        "directory": str(diagnosis.directory),
        "ranks": list(diagnosis.ranks),
        "versions": list(diagnosis.versions),
        "encodings": list(diagnosis.encodings),
        "verdict": diagnosis.verdict,
        "exit_code": diagnosis.exit_code,
        "summary": diagnosis.summary,
        "warnings": list(diagnosis.warnings),
        "groups": [_group_json(group) for group in diagnosis.groups],
        "positions": [
            {
                "rank": position.rank,
                "known": position.known,
                "wait": _wait_json(position.wait) if position.wait else None,
            }
            for position in diagnosis.positions
        ],
    }


def _group_json(group: GroupDiagnosis) -> dict[str, Any]:
    disagreement = group.disagreement
    return {
        "key": group.key,
        "label": group.label,
        "description": group.description,
        "members": list(group.members),
        "members_source": group.members_source,
        "backend": group.backend,
        "pattern": group.pattern,
        "verdict": group.verdict,
        "notes": list(group.notes),
        "operations": {
            str(rank): [_posted_json(item) for item in posted] for rank, posted in sorted(group.operations.items())
        },
        "disagreement": None
        if disagreement is None
        else {
            "sequence": disagreement.sequence,
            "reason": disagreement.reason,
            "absent": list(disagreement.absent),
            "posted": [_posted_json(item) for item in disagreement.posted],
        },
        "waits": [_wait_json(wait) for wait in group.waits],
        "transfers": [
            {
                "source": transfer.source,
                "destination": transfer.destination,
                "number": transfer.number,
                "problem": transfer.problem or None,
                "send": _posted_json(transfer.send) if transfer.send else None,
                "recv": _posted_json(transfer.recv) if transfer.recv else None,
            }
            for transfer in group.transfers
        ],
    }


def _wait_json(wait: Wait) -> dict[str, Any]:
    return {
        "rank": wait.rank,
        "group": wait.group_key,
        "group_label": wait.group_label,
        "operation": _posted_json(wait.posted),
    }


def _posted_json(item: PostedOperation) -> dict[str, Any]:
    entry = item.entries[0]
    return {
        "rank": item.rank,
        "sequence": item.sequence,
        "operation": item.operation,
        "p2p": item.is_p2p,
        "state": item.state,
        "profiling_names": [each.profiling_name for each in item.entries],
        "record_ids": [each.record_id for each in item.entries],
        "input_sizes": [list(shape) for shape in entry.input_sizes],
        "input_dtypes": list(entry.input_dtypes),
        "output_sizes": [list(shape) for shape in entry.output_sizes],
        "output_dtypes": list(entry.output_dtypes),
        "frames": [{"name": frame.name, "filename": frame.filename, "line": frame.line} for frame in entry.frames],
    }


def render_model_check(check: ModelCheck) -> str:
    """The check against a model as text: verdict, mapping, the state and the path into it."""
    lines = ["", f"against the model {check.model}: {check.verdict}"]
    mapping = ", ".join(f"group {group} -> {name}" for group, name in check.mapping.items()) or "no group mapped"
    lines.append(f"  mapping ({check.mapping_source}): {mapping}")
    lines.append(
        f"  searched {check.states} (model state, progress) pairs"
        + ("" if check.complete else " (not all)")
        + f"; {check.consistent_states} consistent with the dumps"
    )
    if check.violated:
        lines.append(f"  violates: {', '.join(check.violated)}")
    if check.pending:
        lines.append(f"  pending in that model state: {'; '.join(check.pending)}")
    if check.divergence is not None:
        lines.append(f"  why: {check.divergence['reason']}")
        for item in check.divergence.get("model_posts_instead", []):
            lines.append(f"    the model could post instead: {item}")
    if check.path:
        title = "shortest model path into it" if check.verdict in ("hang", "desync") else "model path"
        if check.verdict in ("diverges", "inconclusive"):
            title = "the deepest model path matching the dumps"
        lines.append(f"  {title} ({len(check.path)} steps):")
        lines += [f"    {number}. {step}" for number, step in enumerate(check.path, start=1)]
    lines += [f"  note: {note}" for note in check.notes]
    return "".join(printable(line) + "\n" for line in lines)
