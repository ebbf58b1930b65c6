"""lockstep.traces: the versioned JSONL trace format for counterexamples and runtime recordings.

This package owns the format (header and event records, the shipped JSON Schema
``trace-schema.json`` and stdlib-only checks that mirror it), the writer and the message clocks.
It imports only the standard library.
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
