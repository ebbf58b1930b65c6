"""lockstep.traces: the versioned JSONL trace format for counterexamples and runtime recordings.

This package owns the format (the line types of ``schema``, which decode lines, generate the shipped
JSON Schema ``trace-schema.json`` and word the checks' problems; header and event records), reading,
merging, writing and exporting traces, and the message clocks. It imports only the standard library
and msgspec.
"""

from lockstep.traces.clocks import MessageClocks
from lockstep.traces.format import (
    ACTOR_PATTERN,
    TRACE_FORMAT,
    TRACE_VERSION,
    JSONValue,
    TraceEvent,
    TraceFormatError,
    TraceHeader,
    TraceSource,
    encode_line,
    event_problems,
    header_problems,
    schema,
)
from lockstep.traces.writer import TraceWriter, write_trace

__all__ = [
    "ACTOR_PATTERN",
    "TRACE_FORMAT",
    "TRACE_VERSION",
    "JSONValue",
    "MessageClocks",
    "TraceEvent",
    "TraceFormatError",
    "TraceHeader",
    "TraceSource",
    "TraceWriter",
    "encode_line",
    "event_problems",
    "header_problems",
    "schema",
    "write_trace",
]
