"""Merging per-actor trace files into one causal order, and checking that one stream is causal.

The causal order (the rule ``lockstep trace merge`` and ``lockstep replay`` apply):

1. **Program order.** The events of one file keep their order.
2. **Collective rendezvous.** An event whose action is ``enter`` or ``complete`` belongs to op
   number ``k = clock[c]`` of communicator ``c = args["communicator"]`` (or, without that
   argument, the one key of ``clock``). Each member's ``enter`` numbers run 1, 2, 3, ... (the
   first may start anywhere), as do its ``complete`` numbers, and a member completes op k only
   after it entered op k. ``complete`` of op k by any member comes after ``enter`` of op k by
   **every** member of ``c``; the members are the actors with an ``enter`` on ``c`` anywhere in
   the input (in a single stream: seen so far, and a member entering op k after another member
   completed op k is out of order).
3. **Messages.** A clock key ``send:<channel>`` = n says the event sent message n on the channel
   (numbers 1, 2, 3, ... per channel); an event with ``recv:<channel>`` = n comes after it, and
   receives run 1, 2, 3, ... too.

Other clock keys (a model counterexample's completed-op counts, timestamps) are carried along and
not interpreted, but for one: ``time_ns`` (``lockstep.traces.clocks.TIME_KEY``), when an event
happened on the recording machine's monotonic clock. Merging takes, at each step, the first file
(in the order given; a directory's ``*.jsonl`` files sorted by name) whose next event the rule
allows; once the files carry times, the allowed event that happened first (an event without a
time has its file's time so far), so an unrecorded actor's effects follow their causes. The
output is deterministic; when no file's next event is allowed the input is out of causal order, and the
error names each file's blocked line and what it waits for.

A merge first reads every file once (memory: a set of actors and communicators per file), so
all format errors surface before any output, and files whose actors overlap are refused: that
is a merged trace passed together with its sources, or one actor's file given twice.

An input that is not a regular file (``-`` for standard input, ``/dev/stdin``, a FIFO, a shell's
``<(...)``) is read once, as a stream, into an anonymous temporary file that every later pass
reads (so it is never opened twice, which would block on a FIFO or find a pipe drained).
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from lockstep.traces.clocks import TIME_KEY
from lockstep.traces.format import encode_line
from lockstep.traces.output import write_atomically
from lockstep.traces.reader import Record, TraceInputError, TraceReader, same_run

COLLECTIVE_ACTIONS = ("enter", "complete")
SEND_PREFIX, RECEIVE_PREFIX = "send:", "recv:"


class CausalOrder:
    """Streaming checker of the causal rule; memory grows with actors and channels, not events."""

    def __init__(self, members: dict[str, set[str]] | None = None) -> None:
        self.members: dict[str, set[str]] = {name: set(actors) for name, actors in (members or {}).items()}
        self.entered: dict[tuple[str, str], int] = {}
        self.completed: dict[tuple[str, str], int] = {}
        self.completed_max: dict[str, int] = {}
        self.sent: dict[str, int] = {}
        self.received: dict[str, int] = {}

    def problem(self, record: Record) -> tuple[str, bool] | None:
        """Why ``record`` cannot come next: (reason, waits_for_others), or None when it can.

        ``waits_for_others`` is true when another file's later events could unblock it."""
        return self._problem(record.event, None)

    def accept(self, record: Record) -> None:
        """Record that ``record`` came next (call only when ``problem`` is None)."""
        self._accept(record.event, None)

    def advance(self, event: dict[str, Any]) -> str | None:
        """Check and accept ``event`` in one step (a single stream, where nothing can unblock it):
        why it cannot come next, or None, and then it is accepted."""
        found = self._collective(event) if event["action"] in COLLECTIVE_ACTIONS else None
        problem = self._problem(event, found)
        if problem is not None:
            return problem[0]
        self._accept(event, found)
        return None

    def _problem(self, event: dict[str, Any], found: tuple[str, int] | str | None) -> tuple[str, bool] | None:
        clock = event.get("clock")
        action = event["action"]
        if action in COLLECTIVE_ACTIONS:
            if found is None:
                found = self._collective(event)
            if isinstance(found, str):
                return found, False
            communicator, number = found
            actor = event["actor"]
            key = (communicator, actor)
            if action == "enter":
                last = self.entered.get(key)
                if last is not None and number != last + 1:
                    return f"enter of {communicator}#{number} by {actor} follows its enter of #{last}", False
                done = self.completed_max.get(communicator)
                if done is not None and number <= done:
                    return f"enter of {communicator}#{number} by {actor} comes after that op completed", False
            else:
                if self.entered.get(key, -1) < number:
                    return f"complete of {communicator}#{number} by {actor} before its own enter of #{number}", False
                last = self.completed.get(key)
                if last is not None and number != last + 1:
                    return f"complete of {communicator}#{number} by {actor} follows its complete of #{last}", False
                entered = self.entered
                missing = sorted(
                    member
                    for member in self.members.get(communicator, ())
                    if entered.get((communicator, member), -1) < number
                )
                if missing:
                    waiting = ", ".join(missing)
                    return f"complete of {communicator}#{number} waits for enter of #{number} by {waiting}", True
        if clock:
            for key, number in clock.items():
                if key.startswith(SEND_PREFIX):
                    channel = key[len(SEND_PREFIX) :]
                    last = self.sent.get(channel, 0)
                    if number != last + 1:
                        return f"send of message {number} on {channel} follows message {last}", False
                elif key.startswith(RECEIVE_PREFIX):
                    channel = key[len(RECEIVE_PREFIX) :]
                    last = self.received.get(channel, 0)
                    if number != last + 1:
                        return f"receive of message {number} on {channel} follows receive {last}", False
                    if self.sent.get(channel, 0) < number:
                        return f"receive of message {number} on {channel} before its send", True
        return None

    def _accept(self, event: dict[str, Any], found: tuple[str, int] | str | None) -> None:
        action = event["action"]
        if action in COLLECTIVE_ACTIONS:
            if found is None:
                found = self._collective(event)
            assert not isinstance(found, str)
            communicator, number = found
            key = (communicator, event["actor"])
            if action == "enter":
                self.entered[key] = number
                members = self.members.get(communicator)
                if members is None:
                    members = self.members[communicator] = set()
                members.add(event["actor"])
            else:
                self.completed[key] = number
                if number > self.completed_max.get(communicator, number - 1):
                    self.completed_max[communicator] = number
        clock = event.get("clock")
        if clock:
            for key, number in clock.items():
                if key.startswith(SEND_PREFIX):
                    self.sent[key[len(SEND_PREFIX) :]] = number
                elif key.startswith(RECEIVE_PREFIX):
                    self.received[key[len(RECEIVE_PREFIX) :]] = number

    @staticmethod
    def _collective(event: dict[str, Any]) -> tuple[str, int] | str:
        clock = event.get("clock") or {}
        communicator = event["args"].get("communicator")
        if communicator is None and len(clock) == 1:
            communicator = next(iter(clock))
        if not isinstance(communicator, str) or communicator not in clock:
            return (
                f"a collective {event['action']!r} event needs args.communicator and its sequence number "
                "clock[<communicator>]"
            )
        return communicator, clock[communicator]


def trace_files(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    """The files named, with each directory replaced by its ``*.jsonl`` files sorted by name."""
    files: list[str] = []
    for path in paths:
        if Path(path).is_dir():
            found = sorted(str(file) for file in Path(path).glob("*.jsonl") if file.is_file())
            if not found:
                raise TraceInputError(path, 0, "directory holds no *.jsonl trace files")
            files.extend(found)
        else:
            files.append(str(path))
    return files


STDIN = "-"


def _spool(file: str) -> IO[bytes] | None:
    """A non-regular input (``-``, a pipe, a FIFO, a device) copied once into a temporary file
    (positioned at its start); None for a regular file, which is read in place."""
    if file != STDIN and (not os.path.exists(file) or stat.S_ISREG(os.stat(file).st_mode)):
        return None
    spool = tempfile.TemporaryFile()  # noqa: SIM115 - the TraceInput holds it
    if file == STDIN:
        shutil.copyfileobj(sys.stdin.buffer, spool)
    else:
        with open(file, "rb") as source:
            shutil.copyfileobj(source, spool)
    spool.seek(0)
    return spool


@dataclass
class TraceInput:
    """One run's events from one or more files, in causal order (``records()``, as often as needed)."""

    files: list[str]
    header: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    _members: dict[str, set[str]] = field(default_factory=dict)
    _actors: set[str] = field(default_factory=set)
    _spools: dict[str, IO[bytes]] = field(default_factory=dict)

    def reader(self, file: str) -> TraceReader:
        """A reader of ``file`` from its start (a spooled input is read from its copy)."""
        spool = self._spools.get(file)
        if spool is None:
            return TraceReader(file)
        spool.seek(0)
        return TraceReader("<stdin>" if file == STDIN else file, spool)

    def records(self) -> Iterator[Record]:
        """The events in causal order, read afresh from the files (a spooled input from its copy) on
        each call, so a caller may pass over them more than once in flat memory."""
        return self._single() if len(self.files) == 1 else self._merged()

    def _warn(self, warnings: list[str]) -> None:
        """Add a reader's warnings, each once however many passes find it."""
        self.warnings.extend(warning for warning in warnings if warning not in self.warnings)

    def _single(self) -> Iterator[Record]:
        order = CausalOrder()
        plain_clocks: set[tuple[str, ...]] = set()  # clock key sets with no send:/recv: key
        collective = COLLECTIVE_ACTIONS
        with self.reader(self.files[0]) as reader:
            try:
                for record in reader.events():
                    event = record.event
                    if event["action"] not in collective:
                        clock = event.get("clock")
                        if not clock:
                            yield record
                            continue
                        keys = tuple(clock)
                        if keys in plain_clocks:
                            yield record
                            continue
                        messages = any(key.startswith((SEND_PREFIX, RECEIVE_PREFIX)) for key in keys)
                        if not messages and len(plain_clocks) < 1024:
                            plain_clocks.add(keys)
                    problem = order.advance(event)
                    if problem is not None:
                        raise TraceInputError(record.path, record.line, f"event out of causal order: {problem}")
                    yield record
            finally:
                self._warn(reader.warnings)

    def _missing_senders(self, waits: list[str]) -> str:
        """A hint naming the senders of awaited messages that no input file holds."""
        missing = sorted(
            {wait.split(" on ", 1)[1].split(">", 1)[0] for wait in waits if " before its send" in wait} - self._actors
        )
        if not missing:
            return ""
        return (
            f" (no file holds the events of {', '.join(missing)}: record every actor that sends messages, "
            "or merge the files that do)"
        )

    def _merged(self) -> Iterator[Record]:
        order = CausalOrder(self._members)
        readers = [self.reader(file) for file in self.files]
        try:
            streams = [reader.events() for reader in readers]
            heads: list[Record | None] = [next(stream, None) for stream in streams]
            index = 0
            timed = False  # some event carried a time: the allowed event that happened first goes next
            times: list[int] = [-1] * len(heads)  # each file's time so far (-1: none yet)
            while True:
                live = [position for position, head in enumerate(heads) if head is not None]
                if not live:
                    break
                chosen = None
                waits: list[str] = []
                for position in live:
                    head = heads[position]
                    assert head is not None
                    at = _time(head, times[position])
                    timed = timed or at >= 0
                    found = order.problem(head)
                    if found is None:
                        if chosen is None or at < _time(heads[chosen], times[chosen]):
                            chosen = position
                        if not timed:
                            break
                        continue
                    reason, waiting = found
                    if not waiting:
                        raise TraceInputError(head.path, head.line, f"event out of causal order: {reason}")
                    waits.append(f"{head.path}:{head.line} {reason}")
                if chosen is None:
                    first = heads[live[0]]
                    assert first is not None
                    raise TraceInputError(
                        first.path,
                        first.line,
                        "events out of causal order, no file can go on: "
                        + "; ".join(waits)
                        + self._missing_senders(waits),
                    )
                head = heads[chosen]
                assert head is not None
                times[chosen] = _time(head, times[chosen])
                order.accept(head)
                event = dict(head.event)
                event["index"] = index
                index += 1
                yield Record(head.path, head.line, event)
                heads[chosen] = next(streams[chosen], None)
        finally:
            for reader in readers:
                self._warn(reader.warnings)
                reader.close()


def _time(record: Record | None, so_far: int) -> int:
    """When ``record`` happened (its ``time_ns``), else its file's time so far."""
    clock = record.event.get("clock") if record is not None else None
    found = clock.get(TIME_KEY) if clock else None
    return found if isinstance(found, int) else so_far


def open_traces(paths: Sequence[str | os.PathLike[str]]) -> TraceInput:
    """The input named by ``paths`` (files or directories): headers checked against each other and,
    for several files, every file read once to find its actors (disjoint) and communicators."""
    files = trace_files(paths)
    if not files:
        raise TraceInputError("<arguments>", 0, "no trace files given")
    if len(set(files)) != len(files):
        repeated = next(file for file in files if files.count(file) > 1)
        raise TraceInputError(repeated, 0, "the same file is given twice")
    trace = TraceInput(files, {})
    for file in files:
        spool = _spool(file)
        if spool is not None:
            trace._spools[file] = spool
    headers = []
    for file in files:
        with trace.reader(file) as reader:
            headers.append(reader.header)
    for file, header in zip(files[1:], headers[1:]):
        reason = same_run(headers[0], header)
        if reason is not None:
            raise TraceInputError(file, 1, f"not the same run as {files[0]}: {reason}")
    trace.header = headers[0]
    if len(files) > 1:
        owner: dict[str, str] = {}
        for file in files:
            with trace.reader(file) as reader:
                for record in reader.events():
                    event = record.event
                    actor = event["actor"]
                    first = owner.setdefault(actor, file)
                    trace._actors.add(actor)
                    if first != file:
                        raise TraceInputError(
                            file,
                            record.line,
                            f"actor {actor} also has events in {first}: a merged trace given together with its "
                            "sources, or one actor's file given twice",
                        )
                    if event["action"] == "enter":
                        found = CausalOrder._collective(event)
                        if isinstance(found, str):
                            raise TraceInputError(file, record.line, found)
                        trace._members.setdefault(found[0], set()).add(actor)
    return trace


def merge_to_file(paths: Sequence[str | os.PathLike[str]], output: str | os.PathLike[str]) -> tuple[int, list[str]]:
    """Merge ``paths`` into one trace file at ``output``; the number of events and any warnings.

    Written as every output is (``lockstep.traces.output.write_atomically``): a file renamed into
    place only when complete, a device written in place; a write the system refuses is an
    ``OutputError`` naming ``output``."""
    trace = open_traces(paths)
    if any(Path(file).resolve() == Path(output).resolve() for file in trace.files):
        raise TraceInputError(output, 0, "the output file is one of the inputs")
    count = 0

    def write(out: IO[str]) -> None:
        nonlocal count
        out.write(encode_line(trace.header))
        for record in trace.records():
            out.write(encode_line(record.event))
            count += 1

    write_atomically(output, write)
    return count, trace.warnings
