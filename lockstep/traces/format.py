"""The lockstep trace format, version 1: its records, its JSON Schema and its checks.

A trace is a JSON Lines file (UTF-8, lines separated by '\\n' only, so readers must
not use ``str.splitlines``). The first line is a header naming the protocol,
variant, instance, parameters and the source of the events (a model checker
counterexample or a runtime recording); every later line is one event taken by
one actor. The JSON Schema shipped next to this module
(``trace-schema.json``, draft 2020-12) is the normative description;
``header_problems`` and ``event_problems`` mirror it with the standard library
only, so the writer (and later the reader) can refuse bad lines without
third-party packages.

One deliberate difference: JSON Schema counts a number with a zero fraction
(``1.0``) as an integer, while these checks want an integer literal for
``version``, ``index`` and clock values. The checks also refuse values that are
not JSON at all (NaN, infinities, tuples, non-string keys), which the schema
never sees because they cannot be parsed from a JSON line.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal, TypeAlias

TRACE_FORMAT = "lockstep-trace"
TRACE_VERSION = 1
SCHEMA_RESOURCE = "trace-schema.json"

# A kind word, optionally followed by ':' and an id ("rank:1", "coordinator",
# "group:dp", "engine:0"). The end is written as a lookahead rather than '$'
# because Python's '$' (used by jsonschema's re.search) also matches before a
# trailing newline; '(?![\s\S])' means the true end in Python and ECMA-262 alike.
ACTOR_PATTERN = r"^[a-z][a-z0-9_]*(:[A-Za-z0-9_.-]+)?(?![\s\S])"

JSONValue: TypeAlias = (
    None | bool | int | float | str | Sequence["JSONValue"] | Mapping[str, "JSONValue"]
)
"""A value allowed in ``parameters``, ``args`` and ``observed``."""

SOURCE_KINDS = ("model", "runtime")
SOURCE_DETAILS = ("backend", "device", "torch", "cuda", "host")
HEADER_FIELDS = ("format", "version", "protocol", "variant", "instance", "parameters", "source")
EVENT_REQUIRED_FIELDS = ("index", "actor", "action", "args")
EVENT_OPTIONAL_FIELDS = ("observed", "clock")

_ACTOR_REGEX = re.compile(ACTOR_PATTERN)


class TraceFormatError(ValueError):
    """A header or event that does not fit the trace format; the message names what is wrong."""


@dataclass(frozen=True)
class TraceSource:
    """Where a trace's events came from, with the runtime's versions where known."""

    kind: Literal["model", "runtime"]
    backend: str | None = None
    device: str | None = None
    torch: str | None = None
    cuda: str | None = None
    host: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The source as a JSON object; unknown details are written as null."""
        return {
            "kind": self.kind,
            "backend": self.backend,
            "device": self.device,
            "torch": self.torch,
            "cuda": self.cuda,
            "host": self.host,
        }


@dataclass(frozen=True)
class TraceHeader:
    """The first line of a trace."""

    protocol: str
    variant: str
    instance: str
    parameters: Mapping[str, JSONValue]
    source: TraceSource

    def to_json(self) -> dict[str, Any]:
        """The header as a JSON object, with the format name and version added."""
        return {
            "format": TRACE_FORMAT,
            "version": TRACE_VERSION,
            "protocol": self.protocol,
            "variant": self.variant,
            "instance": self.instance,
            "parameters": _plain(self.parameters),
            "source": self.source.to_json(),
        }


@dataclass(frozen=True)
class TraceEvent:
    """One step taken by one actor; ``index`` counts event lines from 0."""

    index: int
    actor: str
    action: str
    args: Mapping[str, JSONValue] = field(default_factory=dict)
    observed: Mapping[str, JSONValue] | None = None
    clock: Mapping[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        """The event as a JSON object; ``observed`` and ``clock`` are left out when None."""
        result: dict[str, Any] = {
            "index": self.index,
            "actor": self.actor,
            "action": self.action,
            "args": _plain(self.args),
        }
        if self.observed is not None:
            result["observed"] = _plain(self.observed)
        if self.clock is not None:
            result["clock"] = _plain(self.clock)
        return result


def schema() -> dict[str, Any]:
    """The shipped JSON Schema (draft 2020-12), freshly parsed on each call."""
    text = resources.files(__package__ or "lockstep.traces").joinpath(SCHEMA_RESOURCE)
    loaded: dict[str, Any] = json.loads(text.read_text(encoding="utf-8"))
    return loaded


def encode_line(obj: Mapping[str, Any]) -> str:
    """One compact JSON line ending in '\\n'; NaN, infinities and non-JSON values are refused."""
    try:
        text = json.dumps(
            obj, separators=(",", ":"), sort_keys=False, ensure_ascii=False, allow_nan=False
        )
        text.encode("utf-8")
    except (ValueError, TypeError) as error:
        raise TraceFormatError(f"line cannot be written as JSON: {error}") from error
    return text + "\n"


def header_problems(obj: object) -> list[str]:
    """Everything wrong with a parsed header line, in field order; empty when it is valid."""
    if not isinstance(obj, dict):
        return [f"header must be a JSON object, got {_describe(obj)}"]
    problems = _field_set_problems(obj, HEADER_FIELDS, (), "")
    if "format" in obj and (not isinstance(obj["format"], str) or obj["format"] != TRACE_FORMAT):
        problems.append(f"field 'format' must be {TRACE_FORMAT!r}, got {_describe(obj['format'])}")
    if "version" in obj and not (_is_integer(obj["version"]) and obj["version"] == TRACE_VERSION):
        problems.append(f"field 'version' must be {TRACE_VERSION}, got {_describe(obj['version'])}")
    if "protocol" in obj and not _is_nonempty_string(obj["protocol"]):
        problems.append(
            f"field 'protocol' must be a non-empty string, got {_describe(obj['protocol'])}"
        )
    for name in ("variant", "instance"):
        if name in obj and not isinstance(obj[name], str):
            problems.append(f"field {name!r} must be a string, got {_describe(obj[name])}")
    if "parameters" in obj:
        problems.extend(_object_problems(obj["parameters"], "parameters"))
    if "source" in obj:
        problems.extend(_source_problems(obj["source"]))
    return problems


def event_problems(obj: object) -> list[str]:
    """Everything wrong with a parsed event line, in field order; empty when it is valid."""
    if not isinstance(obj, dict):
        return [f"event must be a JSON object, got {_describe(obj)}"]
    problems = _field_set_problems(obj, EVENT_REQUIRED_FIELDS, EVENT_OPTIONAL_FIELDS, "")
    if "index" in obj and not (_is_integer(obj["index"]) and obj["index"] >= 0):
        problems.append(
            f"field 'index' must be a non-negative integer, got {_describe(obj['index'])}"
        )
    if "actor" in obj and not (isinstance(obj["actor"], str) and _ACTOR_REGEX.search(obj["actor"])):
        problems.append(
            "field 'actor' must be a string like 'rank:1', 'coordinator' or 'group:dp'"
            f" (a kind word, optionally ':' and an id), got {_describe(obj['actor'])}"
        )
    if "action" in obj and not _is_nonempty_string(obj["action"]):
        problems.append(
            f"field 'action' must be a non-empty string, got {_describe(obj['action'])}"
        )
    for name in ("args", "observed"):
        if name in obj:
            problems.extend(_object_problems(obj[name], name))
    if "clock" in obj:
        problems.extend(_clock_problems(obj["clock"]))
    return problems


def _plain(value: object) -> Any:
    """Mappings become dicts and lists or tuples become lists, recursively; all else is kept."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_nonempty_string(value: object) -> bool:
    return isinstance(value, str) and value != ""


def _field_set_problems(
    obj: dict[Any, Any], required: Sequence[str], optional: Sequence[str], prefix: str
) -> list[str]:
    problems = [f"missing field '{prefix}{name}'" for name in required if name not in obj]
    allowed = set(required) | set(optional)
    problems.extend(f"unexpected field '{prefix}{key}'" for key in obj if key not in allowed)
    return problems


def _source_problems(source: object) -> list[str]:
    if not isinstance(source, dict):
        return [f"field 'source' must be a JSON object, got {_describe(source)}"]
    problems = _field_set_problems(source, ("kind",), SOURCE_DETAILS, "source.")
    if "kind" in source and (
        not isinstance(source["kind"], str) or source["kind"] not in SOURCE_KINDS
    ):
        problems.append(
            f"field 'source.kind' must be 'model' or 'runtime', got {_describe(source['kind'])}"
        )
    for name in SOURCE_DETAILS:
        if name in source and source[name] is not None and not isinstance(source[name], str):
            problems.append(
                f"field 'source.{name}' must be a string or null, got {_describe(source[name])}"
            )
    return problems


def _clock_problems(clock: object) -> list[str]:
    if not isinstance(clock, dict):
        return [f"field 'clock' must be a JSON object, got {_describe(clock)}"]
    problems: list[str] = []
    for key, value in clock.items():
        if not _is_nonempty_string(key):
            problems.append(f"field 'clock' must have non-empty string keys, got {_describe(key)}")
        elif not (_is_integer(value) and value >= 0):
            problems.append(
                f"field 'clock.{key}' must be a non-negative integer, got {_describe(value)}"
            )
    return problems


def _object_problems(value: object, path: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"field {path!r} must be a JSON object, got {_describe(value)}"]
    return _value_problems(value, path)


def _value_problems(value: object, path: str) -> list[str]:
    """Problems with a nested JSON value: only dict, list, str, finite numbers, bool and None."""
    if value is None or isinstance(value, (str, bool, int)):
        return []
    if isinstance(value, float):
        return (
            []
            if math.isfinite(value)
            else [f"field {path!r} must be a finite number, got {value!r}"]
        )
    if isinstance(value, list):
        problems: list[str] = []
        for position, item in enumerate(value):
            problems.extend(_value_problems(item, f"{path}[{position}]"))
        return problems
    if isinstance(value, dict):
        problems = []
        for key, item in value.items():
            if not isinstance(key, str):
                problems.append(f"field {path!r} must have string keys, got {_describe(key)}")
            else:
                problems.extend(_value_problems(item, f"{path}.{key}"))
        return problems
    return [f"field {path!r} must be a JSON value, got {type(value).__name__} {_describe(value)}"]
