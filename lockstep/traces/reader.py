"""Reading lockstep trace files as a stream: the header, then one validated event at a time.

A ``TraceReader`` opens a file in binary mode and reads it one line at a time, so memory stays
flat in the trace's length. Each event line is decoded by msgspec into the line type of
``lockstep.traces.schema`` (``EventLine``: every field's presence and type checked in C; the
actor's pattern checked once per distinct actor), then must carry the next index (0, 1, 2, ...),
so a repeated line is a duplicate and a gap or a step back is out of order. Trace files are data:
nothing is unpickled or evaluated; ``NaN``, ``Infinity`` and numbers beyond a double are refused.
The header line is parsed with the standard library's ``json`` and checked by ``header_problems``.

A line the decoder refuses is parsed again with the standard library, only to say what is wrong:
every problem raises ``TraceInputError`` naming the file, the line and the problem: a binary or
empty file, malformed JSON, JSON nested deeper than ``MAX_NESTING`` levels, a string with a lone
UTF-16 surrogate escape (``"\\ud800"``: not Unicode text, it could not be written out again), a
missing or wrong header, an unsupported version, a missing or mistyped field (worded by
``event_problems`` from the same line types). One exception: a final line with no newline that
does not parse is what a run killed in the middle of a write leaves, so it is not an error; it is
recorded in ``warnings`` and the events before it are the trace.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any, NamedTuple, Self

import msgspec

from lockstep.traces.format import TRACE_FORMAT, TRACE_VERSION, event_problems, header_problems
from lockstep.traces.schema import ACTOR_PATTERN, MAX_NESTING, fast_event_type

__all__ = ["MAX_NESTING", "Record", "TraceInputError", "TraceReader", "check_header", "parse_line", "same_run"]

_ACTOR = re.compile(ACTOR_PATTERN)
_EVENT_DECODER = msgspec.json.Decoder(fast_event_type())
_UNSET = msgspec.UNSET
_DEEP_LINE = 2 * MAX_NESTING + 2  # bytes: a shorter line cannot hold MAX_NESTING + 1 levels of brackets
_KNOWN_ACTORS = 4096  # distinct actors remembered as checked, per reader
_DECODE_ERRORS = (msgspec.DecodeError, RecursionError, UnicodeDecodeError)


class TraceInputError(ValueError):
    """A trace file that cannot be read as a trace; ``str()`` is ``FILE:LINE: problem``."""

    def __init__(self, path: str | os.PathLike[str], line: int, problem: str) -> None:
        self.path = str(path)
        self.line = line
        self.problem = problem
        super().__init__(f"{self.path}:{line}: {problem}")


class Record(NamedTuple):
    """One event as read: the file and line it came from and the parsed, validated JSON object."""

    path: str
    line: int
    event: dict[str, Any]


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON value")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)
_new_record = tuple.__new__


def parse_line(data: bytes, path: str, line: int) -> object:
    """One line's JSON value; a ``TraceInputError`` for bytes that are not UTF-8 JSON."""
    if b"\x00" in data:
        raise TraceInputError(path, line, "binary data (a NUL byte), not a JSON Lines trace")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TraceInputError(path, line, f"not UTF-8 text (byte {error.start + 1}): a binary file?") from None
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        raise TraceInputError(path, line, f"JSON nested too deeply (more than {MAX_NESTING} levels)") from None
    except ValueError as error:
        message = getattr(error, "msg", str(error))
        column = getattr(error, "colno", None)
        where = f" at column {column}" if column is not None else ""
        raise TraceInputError(path, line, f"malformed JSON{where}: {message}") from None
    check_value(value, text, path, line)
    return value


def _parses(data: bytes) -> bool:
    """Whether ``data`` is one JSON value (as the standard library reads it)."""
    try:
        _DECODER.decode(data.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return False
    return True


def _nesting_or_surrogate(value: object) -> str | None:
    """Why ``value`` is refused (too deep, a lone surrogate), walking it without recursion."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return f"a string holds a lone UTF-16 surrogate escape ({item[:40]!r}): not Unicode text"
        elif isinstance(item, (dict, list)):
            if depth > MAX_NESTING:
                return f"JSON nested too deeply (more than {MAX_NESTING} levels)"
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return None


def check_value(value: object, text: str, path: str, line: int) -> None:
    """Refuse a parsed line nested deeper than ``MAX_NESTING`` or holding a lone surrogate
    (looked for only where the text could hold one: a ``\\u`` escape or many brackets)."""
    if "\\u" in text or text.count("[") + text.count("{") > MAX_NESTING:
        problem = _nesting_or_surrogate(value)
        if problem is not None:
            raise TraceInputError(path, line, problem)


def check_header(obj: object, path: str, line: int = 1) -> dict[str, Any]:
    """The header object, or a ``TraceInputError`` saying what is wrong with it."""
    if isinstance(obj, dict) and "format" not in obj and {"index", "actor", "action"} <= obj.keys():
        raise TraceInputError(path, line, "missing header: the first line is an event, not a lockstep-trace header")
    if (
        isinstance(obj, dict)
        and obj.get("format") == TRACE_FORMAT
        and "version" in obj
        and obj["version"] != TRACE_VERSION
    ):
        raise TraceInputError(
            path, line, f"unsupported trace version {obj['version']!r}: this lockstep reads version {TRACE_VERSION}"
        )
    problems = header_problems(obj)
    if problems:
        raise TraceInputError(path, line, "bad header: " + "; ".join(problems))
    assert isinstance(obj, dict)
    return obj


class TraceReader:
    """Reads one trace file: ``header`` at once, then ``events()`` one validated ``Record`` at a time.

    Use as a context manager or call ``close``. ``warnings`` collects the truncated-final-line
    warning (at most one); ``events_read`` counts the events yielded so far. With ``stream``
    the bytes come from it (from where it stands; ``close`` leaves it open) and ``path`` only
    names it in messages."""

    def __init__(self, path: str | os.PathLike[str], stream: IO[bytes] | None = None) -> None:
        self.path = str(path)
        self.warnings: list[str] = []
        self.events_read = 0
        self._line = 1
        self._owned = stream is None
        self._actors: set[str] = set()  # actors already checked against the pattern
        if stream is None and Path(path).is_dir():
            raise TraceInputError(self.path, 0, "is a directory, not a trace file")
        self._file: IO[bytes] | None = open(path, "rb") if stream is None else stream  # noqa: SIM115 - closed by close()
        try:
            first = self._file.readline()
            if not first:
                raise TraceInputError(self.path, 1, "empty file: a trace starts with a header line")
            if not first.endswith(b"\n") and not first.strip():
                raise TraceInputError(self.path, 1, "empty file: a trace starts with a header line")
            self.header = check_header(parse_line(first, self.path, 1), self.path)
        except BaseException:
            self.close()
            raise

    def events(self) -> Iterator[Record]:
        """The events in file order; a ``TraceInputError`` at the first bad line."""
        file = self._file
        if file is None:
            raise ValueError(f"trace reader for {self.path} is closed")
        path = self.path
        line = self._line
        expected = self.events_read
        decode = _EVENT_DECODER.decode
        actors = self._actors
        new_record = _new_record
        unset = _UNSET
        for data in file:
            line += 1
            try:
                decoded = decode(data)
            except _DECODE_ERRORS as error:
                if not data.endswith(b"\n") and b"\x00" not in data and not _parses(data):
                    self.warnings.append(
                        f"{path}:{line}: the final line is cut short (no newline) and does not parse, as a killed "
                        f"run leaves it; the {expected} events before it are checked"
                    )
                    break
                raise self._refused(data, line, error) from None
            index, actor = decoded.index, decoded.actor
            event = {"index": index, "actor": actor, "action": decoded.action, "args": decoded.args}
            if decoded.observed is not unset:
                event["observed"] = decoded.observed
            if decoded.clock is not unset:
                event["clock"] = decoded.clock
            if len(data) > _DEEP_LINE and data.count(b"[") + data.count(b"{") > MAX_NESTING:  # could be too deep
                problem = _nesting_or_surrogate(event)
                if problem is not None:
                    raise TraceInputError(path, line, problem)
            if actor not in actors:
                if _ACTOR.search(actor) is None:
                    raise TraceInputError(path, line, "bad event: " + "; ".join(event_problems(event)))
                if len(actors) < _KNOWN_ACTORS:
                    actors.add(actor)
            if index != expected:
                if index < expected:
                    raise TraceInputError(
                        path, line, f"duplicate event: index {index} was already read (expected {expected} next)"
                    )
                raise TraceInputError(
                    path, line, f"event out of order: index {index}, expected {expected} (indices count up from 0)"
                )
            expected += 1
            self._line = line
            self.events_read = expected
            yield new_record(Record, (path, line, event))

    def _refused(self, data: bytes, line: int, error: Exception) -> TraceInputError:
        """What is wrong with a line the decoder refused, in the words of the standard checks."""
        value = parse_line(data, self.path, line)  # raises for bytes that are not UTF-8 JSON
        problems = event_problems(value)
        if problems:
            return TraceInputError(self.path, line, "bad event: " + "; ".join(problems))
        return TraceInputError(self.path, line, f"bad event: {error}")  # only the decoder sees it (e.g. 1e400)

    def close(self) -> None:
        if self._file is not None:
            if self._owned:
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


def same_run(first: dict[str, Any], other: dict[str, Any]) -> str | None:
    """Why two headers cannot belong to one run (protocol, variant, instance or parameters differ), or None."""
    for name in ("protocol", "variant", "instance", "parameters"):
        if first.get(name) != other.get(name):
            return f"its header's {name} {other.get(name)!r} differs from {first.get(name)!r}"
    return None
