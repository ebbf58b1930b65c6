"""Reading lockstep trace files as a stream: the header, then one validated event at a time.

A ``TraceReader`` opens a file in binary mode and reads it one line at a time, so memory stays
flat in the trace's length. Every line is decoded as UTF-8 and parsed with the standard
library's ``json`` (trace files are data: nothing is unpickled or evaluated; ``NaN`` and
``Infinity``, which are not JSON, are refused). The header must pass ``header_problems``; each
event must pass the checks of ``event_problems`` (a fast path accepts the common shape and
falls back to ``event_problems`` for the message) and carry the next index (0, 1, 2, ...), so a
repeated line is a duplicate and a gap or a step back is out of order.

Every problem raises ``TraceInputError`` naming the file, the line and what is wrong: a binary
or empty file, malformed JSON, JSON nested deeper than ``MAX_NESTING`` levels, a string with a
lone UTF-16 surrogate escape (``"\\ud800"``: not Unicode text, it could not be written out
again), a missing or wrong header, an unsupported version, a missing or mistyped field. One exception: a final line with no newline that does not parse is what a run
killed in the middle of a write leaves, so it is not an error; it is recorded in ``warnings``
and the events before it are the trace.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any, NamedTuple, Self

from lockstep.traces.format import TRACE_FORMAT, TRACE_VERSION, event_problems, header_problems

_ABSENT = object()
MAX_NESTING = 64  # arrays and objects inside one another; a trace needs a handful
_REQUIRED_FIELDS = ("index", "actor", "action", "args")


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
# what ``_DECODER.decode`` runs, without its two whitespace matches: (value, end) from a position
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]
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
    if isinstance(obj, dict) and obj.get("format") == TRACE_FORMAT and "version" in obj and obj["version"] != TRACE_VERSION:
        raise TraceInputError(
            path, line, f"unsupported trace version {obj['version']!r}: this lockstep reads version {TRACE_VERSION}"
        )
    problems = header_problems(obj)
    if problems:
        raise TraceInputError(path, line, "bad header: " + "; ".join(problems))
    assert isinstance(obj, dict)
    return obj


def _event_is_well_formed(obj: object) -> bool:
    """The fast path of ``event_problems``: true only for events it would accept."""
    if type(obj) is not dict:
        return False
    try:
        index, actor, action, args = obj["index"], obj["actor"], obj["action"], obj["args"]
    except KeyError:
        return False
    if type(index) is not int or index < 0 or type(actor) is not str or type(action) is not str or not action \
            or type(args) is not dict:
        return False
    fields = 4  # and no field beyond the optional observed and clock: counted, not searched
    observed = obj.get("observed", _ABSENT)
    if observed is not _ABSENT:
        if type(observed) is not dict:
            return False
        fields = 5
    clock = obj.get("clock", _ABSENT)
    if clock is not _ABSENT:
        fields += 1
        if clock is not None:
            if type(clock) is not dict:
                return False
            for key, value in clock.items():
                if not key or type(value) is not int or value < 0:
                    return False
    return len(obj) == fields and (actor in _ACTORS_SEEN or _actor_is_well_formed(actor))


_ACTORS_SEEN: set[str] = set()


def _actor_is_well_formed(actor: str) -> bool:
    if actor in _ACTORS_SEEN:
        return True
    if event_problems({"index": 0, "actor": actor, "action": "a", "args": {}}):
        return False
    if len(_ACTORS_SEEN) < 4096:
        _ACTORS_SEEN.add(actor)
    return True


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
        scan, decode = _SCAN, _DECODER.decode
        well_formed = _event_is_well_formed
        for data in file:
            line += 1
            try:
                text = data.decode("utf-8")
                try:  # the common line: one object, then the newline
                    obj, end = scan(text, 0)
                except StopIteration:
                    obj, end = None, -1
                if end != len(text) - 1 or text[end] != "\n":
                    obj = decode(text)  # anything else: the decoder's own checks and messages
                check_value(obj, text, path, line)
            except TraceInputError:
                raise
            except (ValueError, UnicodeDecodeError, RecursionError):
                if not data.endswith(b"\n") and b"\x00" not in data:
                    self.warnings.append(
                        f"{path}:{line}: the final line is cut short (no newline) and does not parse, as a killed "
                        f"run leaves it; the {expected} events before it are checked"
                    )
                    break
                obj = parse_line(data, path, line)  # raises with the precise message
            if not well_formed(obj):
                problems = event_problems(obj)
                if problems:
                    raise TraceInputError(path, line, "bad event: " + "; ".join(problems))
            index = obj["index"]
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
            yield _new_record(Record, (path, line, obj))

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
