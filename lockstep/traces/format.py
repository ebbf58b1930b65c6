"""The lockstep trace format, version 1: the records a program writes, and the checks of a line.

A trace is a JSON Lines file (UTF-8, lines separated by '\\n' only, so readers must not use
``str.splitlines``). The first line is a header naming the protocol, variant, instance, parameters
and the source of the events (a model checker counterexample or a runtime recording); every later
line is one event taken by one actor. The line types in ``lockstep.traces.schema`` define the
format: they decode lines, generate the shipped JSON Schema (``trace-schema.json``, draft 2020-12,
read by ``schema()``) and word the problems ``header_problems`` and ``event_problems`` list.

This module holds the records (``TraceHeader``, ``TraceEvent``, ``TraceSource``) with their JSON
forms, and ``encode_line``. The checks also refuse values that are not JSON at all (NaN,
infinities, sets, non-string keys), which a writer may be handed but a parsed line never holds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal, TypeAlias

from lockstep.traces.problems import line_problems
from lockstep.traces.schema import ACTOR_PATTERN as ACTOR_PATTERN  # the format's constants live in schema
from lockstep.traces.schema import SCHEMA_RESOURCE, EventLine, HeaderLine
from lockstep.traces.schema import TRACE_FORMAT as TRACE_FORMAT
from lockstep.traces.schema import TRACE_VERSION as TRACE_VERSION

JSONValue: TypeAlias = None | bool | int | float | str | Sequence["JSONValue"] | Mapping[str, "JSONValue"]
"""A value allowed in ``parameters``, ``args`` and ``observed``."""


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
        text = json.dumps(obj, separators=(",", ":"), sort_keys=False, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
    except (ValueError, TypeError) as error:
        raise TraceFormatError(f"line cannot be written as JSON: {error}") from error
    return text + "\n"


def header_problems(obj: object) -> list[str]:
    """Everything wrong with a parsed header line, in field order; empty when it is valid."""
    return line_problems(obj, HeaderLine, "header")


def event_problems(obj: object) -> list[str]:
    """Everything wrong with a parsed event line, in field order; empty when it is valid."""
    return line_problems(obj, EventLine, "event")


def _plain(value: object) -> Any:
    """Mappings become dicts and lists or tuples become lists, recursively; all else is kept."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value
