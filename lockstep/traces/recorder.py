"""The one recorder core: an actor's trace file written event by event, fast and crash-safe.

Both trace producers write through ``EventRecorder``: the reference runtime's processes
(``lockstep.impl.runtime.Recorder``, which adds its status board) and instrumented real code
(``lockstep.record.TraceRecorder``). It owns

- the file's place: ``DIRECTORY/<actor>.jsonl`` through ``trace_file_name`` (the one
  output-name rule, ``lockstep.traces.output.safe_name``: ``rank:0`` becomes ``rank-0.jsonl``);
- the header, validated and written by ``TraceWriter`` (one write) into a file it creates (one
  that exists, or a link planted in its place, is a ``FileExistsError`` naming it);
- events on the hot path: each line built as one string, the actor/action/args prefix of a
  repeated event encoded once, and handed to the OS in one ``write`` before ``record`` returns,
  so a killed process leaves a prefix of complete lines; validation at first use (the first
  event of each action is checked with ``event_problems``: the runtime's events of one action
  always have the same shape and value types; ``check_every_event=True`` checks them all, for
  instrumented code whose events may vary), and a value JSON cannot carry, such as NaN, is a
  ``TraceFormatError`` from the encoder whatever the mode;
- the message clocks (``send``/``receive``, from ``MessageClocks``) and the per-communicator
  sequence numbers of collective ops (``enter``/``complete``/``collective``);
- the protocol's vocabulary (any ``EventVocabulary``, in practice ``lockstep.spec.vocabulary``'s,
  derived from the model): given one, every event is checked through it, with or without a file,
  so the first action, argument, communicator, observed name or value the model does not have is a
  ``TraceFormatError`` naming it; ``Projection`` encodes a fixed list of observed entries (named
  through the vocabulary) as one JSON object, each value checked the first time it is seen.

With no path it only counts events (a run without a trace directory).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from lockstep.traces.clocks import MessageClocks
from lockstep.traces.format import JSONValue, TraceFormatError, TraceHeader, event_problems
from lockstep.traces.merge import COLLECTIVE_ACTIONS
from lockstep.traces.output import safe_name
from lockstep.traces.writer import TraceWriter


def trace_file_name(actor: str) -> str:
    """An actor's trace file name: ``rank:0`` → ``rank-0.jsonl``."""
    return safe_name(actor) + ".jsonl"


class RawObject(str):
    """A JSON object already encoded (by a ``Projection``, whose values it checked)."""


_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


class EventVocabulary(Protocol):
    """What a recorder checks its events against (``lockstep.spec.vocabulary.Vocabulary``); each
    check raises ``ValueError`` naming what the model does not have."""

    def check_action(self, action: str, args: Mapping[str, object]) -> None: ...

    def check_collective(self, communicator: str, op: str) -> None: ...

    def check_observed(self, name: str, value: object) -> None: ...


class Projection:
    """A fixed list of observed names (made with the vocabulary's ``entry``), encoded as one JSON
    object by ``encode(*values)``; each value is checked through the vocabulary the first time it is
    seen at its place, and its encoding remembered."""

    def __init__(self, vocabulary: EventVocabulary, names: Sequence[str]) -> None:
        self.vocabulary = vocabulary
        self.names = tuple(names)
        self._prefixes = tuple(
            ("{" if position == 0 else ",") + _encode(name) + ":" for position, name in enumerate(names)
        )
        self._encoded: tuple[dict[object, tuple[type, str]], ...] = tuple({} for _ in self.names)

    def encode(self, *values: JSONValue) -> RawObject:
        if len(values) != len(self.names):
            raise TraceFormatError(f"a projection of {len(self.names)} names got {len(values)} values")
        parts: list[str] = []
        for prefix, name, known, value in zip(self._prefixes, self.names, self._encoded, values):
            found = known.get(value)
            if found is None or found[0] is not type(value):
                try:
                    self.vocabulary.check_observed(name, value)
                    found = (type(value), _encode(value))
                except (TypeError, ValueError) as error:
                    raise TraceFormatError(f"bad observed value: {error}") from None
                known[value] = found
            parts.append(prefix + found[1])
        return RawObject("".join(parts) + "}" if parts else "{}")


class EventRecorder(MessageClocks):
    """The trace file of one actor (one process); safe to share between threads."""

    def __init__(
        self,
        actor: str,
        path: str | os.PathLike[str] | None,
        header: TraceHeader,
        *,
        fsync: bool = False,
        check_every_event: bool = False,
        vocabulary: EventVocabulary | None = None,
    ) -> None:
        super().__init__()  # send / receive: the message clocks
        self.actor = actor
        self.vocabulary = vocabulary
        self.events = 0
        self.write_nanoseconds = 0  # time spent encoding and writing trace lines
        self._fsync = fsync
        self._check_every_event = check_every_event
        self._lock = threading.Lock()
        self._checked: set[str] = set()
        self._prefixes: dict[tuple[object, ...], str] = {}  # encoded actor, action and args
        self._keys: dict[str, str] = {}  # encoded clock keys
        self._sequence: collections.Counter[str] = collections.Counter()  # collective ops per communicator
        self._deferred = ""  # complete lines waiting for the next event's write
        self._descriptor: int | None = None
        self.path: Path | None = None
        if path is not None:
            self.path = Path(path)
            # created here and kept open (never reopened by name): a planted link or an earlier
            # run's file at the path is refused, not followed or mixed into this trace
            self._descriptor = TraceWriter(self.path, header, fsync=fsync, exclusive=True).detach()

    def record(
        self,
        action: str,
        args: Mapping[str, JSONValue] | None = None,
        observed: Mapping[str, JSONValue] | RawObject | None = None,
        clock: Mapping[str, int] | None = None,
        actor: str | None = None,
        flush: bool = True,
    ) -> None:
        """Write one event (handed to the OS before returning); with no file, only count it.

        ``flush=False`` keeps the line to be written in one ``write`` with the next event's line; only
        for an event the same thread follows at once with another (never before blocking)."""
        with self._lock:
            if self.vocabulary is not None:
                self._check_vocabulary(self.vocabulary, action, args, observed)
            if self._descriptor is None:
                self.events += 1
                return
            started = time.perf_counter_ns()
            line = self._line(self.events, action, args, observed, clock, actor)  # a bad event: nothing counted
            self.events += 1
            if not flush:  # written with the next event (the caller records another one at once)
                self._deferred += line
            else:
                self._write((self._deferred + line).encode("utf-8"))
                self._deferred = ""
            self.write_nanoseconds += time.perf_counter_ns() - started

    def _line(
        self,
        index: int,
        action: str,
        args: Mapping[str, JSONValue] | None,
        observed: Mapping[str, JSONValue] | RawObject | None,
        clock: Mapping[str, int] | None,
        actor: str | None,
    ) -> str:
        key = (actor, action, tuple(args.items()) if args else ())
        cacheable = True
        try:
            prefix = self._prefixes.get(key)
        except TypeError:  # unhashable argument values: encode afresh
            cacheable, prefix = False, None
        try:
            if prefix is None:
                prefix = (
                    f',"actor":{_encode(actor or self.actor)},"action":{_encode(action)},"args":{_encode(args or {})}'
                )
                if cacheable:
                    self._prefixes[key] = prefix
            line = f'{{"index":{index}{prefix}'
            if observed is not None:
                line += f',"observed":{observed if isinstance(observed, RawObject) else _encode(observed)}'
            if clock:
                line += (
                    ',"clock":{' + ",".join(f"{self._key(name)}:{int(value)}" for name, value in clock.items()) + "}"
                )
        except (TypeError, ValueError) as error:  # NaN, a set, an object JSON cannot carry
            raise TraceFormatError(f"bad trace event {index}: {error}") from None
        line += "}\n"
        if self._check_every_event or action not in self._checked:
            problems = event_problems(json.loads(line))
            if problems:
                raise TraceFormatError(f"bad trace event {index}: " + "; ".join(problems))
            self._checked.add(action)
        return line

    def _check_vocabulary(
        self,
        vocabulary: EventVocabulary,
        action: str,
        args: Mapping[str, JSONValue] | None,
        observed: Mapping[str, JSONValue] | RawObject | None,
    ) -> None:
        """The event's names and values are the model's (a ``RawObject`` was checked by its ``Projection``)."""
        try:
            if action in COLLECTIVE_ACTIONS:
                arguments = args or {}
                vocabulary.check_collective(str(arguments.get("communicator")), str(arguments.get("op")))
            else:
                vocabulary.check_action(action, args or {})
            if observed is not None and not isinstance(observed, RawObject):
                for name, value in observed.items():
                    vocabulary.check_observed(name, value)
        except ValueError as error:
            raise TraceFormatError(f"bad trace event {self.events} of {self.actor}: {error}") from None

    def _write(self, data: bytes) -> None:
        """Hand ``data`` to the OS; a refused write (``ENOSPC``, ``EFBIG``, ``EIO``) is an ``OSError``
        naming the trace file (a write on a descriptor names none)."""
        assert self._descriptor is not None
        try:
            written = os.write(self._descriptor, data)
            while written < len(data):  # a regular file takes it all at once; be safe anyway
                data = data[written:]
                written = os.write(self._descriptor, data)
            if self._fsync:
                os.fsync(self._descriptor)
        except OSError as error:
            raise OSError(error.errno, f"cannot write the trace: {error.strerror}", str(self.path)) from None

    def _key(self, name: str) -> str:
        encoded = self._keys.get(name)
        if encoded is None:
            encoded = self._keys[name] = _encode(name)
        return encoded

    # ------------------------------------------------------------------------------ collective ops
    def enter(self, communicator: str, op: str) -> int:
        """Record this member's ``enter`` of its next op on ``communicator``; return the op's
        per-member sequence number (the event's clock)."""
        with self._lock:
            self._sequence[communicator] += 1
            number = self._sequence[communicator]
        self.record("enter", {"communicator": communicator, "op": op}, clock={communicator: number})
        return number

    def complete(self, communicator: str, op: str, number: int, flush: bool = True) -> None:
        """Record the ``complete`` of op ``number`` on ``communicator`` (see ``record`` for ``flush``)."""
        self.record("complete", {"communicator": communicator, "op": op}, clock={communicator: number}, flush=flush)

    @contextlib.contextmanager
    def collective(self, communicator: str, op: str) -> Iterator[int]:
        """One member's op on ``communicator``: ``enter`` before the block, ``complete`` after it
        (not written if the block raises: the op did not complete). Yields the sequence number."""
        number = self.enter(communicator, op)
        yield number
        self.complete(communicator, op, number)

    def close(self) -> None:
        with self._lock:
            if self._descriptor is not None:
                if self._deferred:
                    self._write(self._deferred.encode("utf-8"))
                    self._deferred = ""
                os.close(self._descriptor)
                self._descriptor = None

    def __enter__(self) -> EventRecorder:
        return self

    def __exit__(self, *exception: object) -> None:
        self.close()
