"""Writing lockstep trace files: one header line, then one line per event.

Each line is encoded completely and validated before it is written (decoded again by the
reader's line type, ``lockstep.traces.schema.EventLine``; a refused line is explained by
``event_problems``), handed to the operating system with a single unbuffered write call (repeated only if the
system accepts fewer bytes), so a process killed at any moment leaves a file
whose complete lines all parse: a readable prefix of the trace. With
``fsync=True`` each line is also forced to disk, so the prefix survives a
machine crash as well. A writer may be shared between threads; ``append``
assigns indices atomically.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from io import FileIO
from pathlib import Path
from types import TracebackType
from typing import Self

import msgspec

from lockstep.traces.format import (
    JSONValue,
    TraceEvent,
    TraceFormatError,
    TraceHeader,
    encode_line,
    event_problems,
    header_problems,
)
from lockstep.traces.output import replacing
from lockstep.traces.schema import EventLine

_EVENT_DECODER = msgspec.json.Decoder(EventLine)


class TraceWriter:
    """Writes one trace file; use as a context manager or call ``close``.

    The header line is written (and flushed) by the constructor. Events must
    carry indices 0, 1, 2, ... in order; ``append`` numbers them for you.
    ``exclusive=True`` (a live run's trace, written where it will stay) creates the file and
    refuses one that exists, a link planted in its place included (``FileExistsError`` naming it);
    otherwise ``path`` is a file made for it (``write_trace``'s temporary file) or a device.
    """

    def __init__(
        self, path: str | os.PathLike[str], header: TraceHeader, *, fsync: bool = False, exclusive: bool = False
    ) -> None:
        header_json = header.to_json()
        problems = header_problems(header_json)
        if problems:
            raise TraceFormatError("bad trace header: " + "; ".join(problems))
        header_line = encode_line(header_json)
        self._path = Path(path)
        self._fsync = fsync
        self._lock = threading.Lock()
        self._events_written = 0
        self._path.parent.mkdir(parents=True, exist_ok=True)
        # Unbuffered, so each line reaches the OS in one write call; open until close().
        try:
            self._file: FileIO | None = open(self._path, "xb" if exclusive else "wb", buffering=0)  # noqa: SIM115
        except FileExistsError as error:
            raise FileExistsError(
                error.errno, "exists: a trace is written only into a new file (remove it or write elsewhere)", str(path)
            ) from None
        try:
            self._write_line(self._file, header_line)
        except BaseException:
            self._file.close()
            self._file = None
            raise

    @property
    def path(self) -> Path:
        """The trace file being written."""
        return self._path

    @property
    def events_written(self) -> int:
        """How many event lines have been written (the header is not counted)."""
        return self._events_written

    @property
    def closed(self) -> bool:
        """Whether ``close`` has been called."""
        return self._file is None

    def write(self, event: TraceEvent) -> None:
        """Validate the event and write it as one flushed line.

        Raises TraceFormatError, writing nothing, if the event is malformed or
        its index is not the next one (``events_written``).
        """
        with self._lock:
            self._write_event(event)

    def append(
        self,
        actor: str,
        action: str,
        args: Mapping[str, JSONValue] | None = None,
        observed: Mapping[str, JSONValue] | None = None,
        clock: Mapping[str, int] | None = None,
    ) -> TraceEvent:
        """Write an event with the next index and return it (TraceFormatError if malformed)."""
        with self._lock:
            event = TraceEvent(
                index=self._events_written,
                actor=actor,
                action=action,
                args={} if args is None else args,
                observed=observed,
                clock=clock,
            )
            self._write_event(event)
        return event

    def detach(self) -> int:
        """The open file's descriptor, handed to the caller (who closes it; a recorder writing its
        own lines after this header); the writer is closed."""
        with self._lock:
            if self._file is None:
                raise ValueError(f"trace writer for {self._path} is closed")
            descriptor = os.dup(self._file.fileno())
        self.close()
        return descriptor

    def close(self) -> None:
        """Close the file; further writes raise ValueError. Closing twice is harmless."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exception_type: type[BaseException] | None,
        exception: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _write_event(self, event: TraceEvent) -> None:
        """Validate and write one event; the caller holds the lock."""
        if self._file is None:
            raise ValueError(f"trace writer for {self._path} is closed")
        event_json = event.to_json()
        try:
            line = encode_line(event_json)
            _EVENT_DECODER.decode(line)
        except (TraceFormatError, msgspec.DecodeError) as error:
            problems = event_problems(event_json) or [str(error)]
            raise TraceFormatError(f"bad trace event {event.index!r}: " + "; ".join(problems)) from None
        if event.index != self._events_written:
            raise TraceFormatError(
                f"event index {event.index} is out of order: expected {self._events_written}"
                " (indices count up from 0 without gaps)"
            )
        self._write_line(self._file, line)
        self._events_written += 1

    def _write_line(self, file: FileIO, line: str) -> None:
        """Hand the whole line to the operating system, then optionally force it to disk."""
        data = memoryview(line.encode("utf-8"))
        while data:
            written = file.write(data)
            if written is None:  # only possible for non-blocking files
                raise OSError(f"could not write to {self._path} without blocking")
            data = data[written:]
        if self._fsync:
            os.fsync(file.fileno())


def write_trace(
    path: str | os.PathLike[str],
    header: TraceHeader,
    events: Iterable[TraceEvent],
    *,
    fsync: bool = False,
) -> Path:
    """Write a whole trace file and return its path: into a temporary file next to it, renamed
    over ``path`` only when complete (a failure leaves an existing file as it was)."""
    with replacing(path) as temporary, TraceWriter(temporary, header, fsync=fsync) as writer:
        for event in events:
            writer.write(event)
    return Path(path)
