"""Exporting a trace for other tools, as a stream: Chrome/Perfetto trace events, and the trace's path as a graph.

Every writer takes the header, an iterable of validated records and a text file, and writes the
document while it reads the records, one at a time: a header or opening part first, each event's
part as its record arrives, then the closing part. Memory stays flat in the trace's length (what
is kept is per actor or per collective op in flight, never per event), so a million-event trace
exports in the memory of a short one.

- ``write_perfetto``: the Chrome trace-event JSON that ui.perfetto.dev and chrome://tracing open.
  One process, one track (thread) per actor, named by ``M`` metadata events (written when the
  actor first acts). Time is the event index (10 µs per event, so the picture shows causal order,
  not wall time). A collective's ``enter`` and ``complete`` are a ``B``/``E`` duration slice on
  the member's track named ``op(communicator)#n``, and the members' slices of one op are joined by
  a flow (``s`` at the first enter, ``t`` at the others), so a collective reads as one arrow across
  ranks; an op is forgotten at its first ``complete`` (the causal order puts every member's enter
  before it). Every other event is an ``X`` slice of 10 µs with its arguments; an ``enter`` that
  never completes (a hang) is closed at the end and marked ``(never completed)``.
- ``write_dot`` and ``write_graphml``: the run as a path graph: node i is the state after event i
  (node 0 the initial state), edge i → i+1 is labelled ``actor: action(args)``.

Only the standard library is used (JSON, XML escaping).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any
from xml.sax.saxutils import escape, quoteattr

from lockstep.traces.reader import Record

TICK = 10  # µs per event
GRAPHML_NAMESPACE = "http://graphml.graphdrawing.org/xmlns"
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
# characters XML 1.0 cannot hold even escaped; written as \uXXXX text instead
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def label(event: Mapping[str, Any]) -> str:
    """``action(name=value, ...)`` with the arguments as compact JSON; the bare action without any."""
    arguments = ", ".join(f"{name}={_COMPACT(value)}" for name, value in event["args"].items())
    return f"{event['action']}({arguments})" if arguments else str(event["action"])


def collective_of(event: Mapping[str, Any]) -> tuple[str, int] | None:
    """(communicator, op number) of a collective ``enter`` or ``complete``; None for other events."""
    if event["action"] not in ("enter", "complete"):
        return None
    clock = event.get("clock") or {}
    communicator = event["args"].get("communicator")
    if communicator is None and len(clock) == 1:
        communicator = next(iter(clock))
    if not isinstance(communicator, str) or communicator not in clock:
        return None
    return communicator, int(clock[communicator])


def perfetto_events(
    header: Mapping[str, Any], records: Iterable[Record], highlight: int | None = None
) -> Iterator[dict[str, Any]]:
    """The trace's Chrome trace events, one at a time; ``highlight`` marks one event (e.g. a violation)."""
    title = f"lockstep {header['protocol']} {header['variant']} {header.get('instance') or ''}".strip()
    yield {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": title}}
    tracks: dict[str, int] = {}
    open_slices: dict[tuple[str, str], tuple[int, str]] = {}  # (actor, communicator) -> (ts, name)
    flows: dict[tuple[str, int], int] = {}  # ops entered and not yet completed -> flow id
    flows_started = 0
    last = 0
    for record in records:
        event = record.event
        index, actor = int(event["index"]), str(event["actor"])
        tid = tracks.get(actor)
        if tid is None:
            tid = tracks[actor] = len(tracks) + 1
            yield {"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": actor}}
            yield {"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": tid, "args": {"sort_index": tid}}
        ts = last = index * TICK
        observed = event.get("observed")
        arguments = {"index": index, **event["args"], **({"observed": observed} if observed else {})}
        collective = collective_of(event)
        if collective is not None:
            communicator, number = collective
            name = f"{event['args'].get('op', 'collective')}({communicator})#{number}"
            if event["action"] == "enter":
                open_slices[(actor, communicator)] = (ts, name)
                yield {"ph": "B", "name": name, "cat": "collective", "pid": 1, "tid": tid, "ts": ts, "args": arguments}
                flow_id = flows.get(collective)
                if flow_id is None:  # the op's first enter starts its flow
                    flows_started += 1
                    flow_id = flows[collective] = flows_started
                    phase = "s"
                else:
                    phase = "t"
                yield {
                    "ph": phase,
                    "name": name,
                    "cat": "collective",
                    "id": flow_id,
                    "pid": 1,
                    "tid": tid,
                    "ts": ts,
                    "bp": "e",
                }
            else:
                open_slices.pop((actor, communicator), None)
                flows.pop(collective, None)  # every member entered before any completes: the flow is whole
                yield {"ph": "E", "pid": 1, "tid": tid, "ts": ts + TICK, "args": arguments}
            continue
        slice_ = {
            "ph": "X",
            "name": label(event),
            "cat": actor.split(":")[0],
            "pid": 1,
            "tid": tid,
            "ts": ts,
            "dur": TICK,
            "args": arguments,
        }
        if highlight is not None and index == highlight:
            slice_["cname"] = "terrible"
            slice_["name"] = f"✗ {slice_['name']}"
        yield slice_
    for (actor, _), (_, name) in sorted(open_slices.items()):
        yield {
            "ph": "E",
            "pid": 1,
            "tid": tracks[actor],
            "ts": last + 2 * TICK,
            "args": {"note": f"{name} never completed"},
        }


def write_perfetto(
    header: Mapping[str, Any], records: Iterable[Record], file: IO[str], highlight: int | None = None
) -> None:
    """The trace as one Chrome trace-event JSON document, one trace event per line."""
    file.write('{"traceEvents":[\n')
    separator = ""
    for event in perfetto_events(header, records, highlight):
        file.write(separator + _COMPACT(event))
        separator = ",\n"
    file.write(f'\n],"displayTimeUnit":"ms","otherData":{{"lockstep":{_COMPACT(dict(header))}}}}}\n')


def _dot_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def path_edges(records: Iterable[Record]) -> Iterator[tuple[int, int, str, Mapping[str, Any]]]:
    """The run as a path: (source node, target node, label, event) per event, one at a time."""
    for record in records:
        index = int(record.event["index"])
        yield index, index + 1, f"{record.event['actor']}: {label(record.event)}", record.event


def write_dot(
    header: Mapping[str, Any], records: Iterable[Record], file: IO[str], highlight: int | None = None
) -> None:
    """The trace's path in Graphviz DOT."""
    title = _dot_string(str(header["protocol"]) + " " + str(header["variant"]))
    file.write(f'digraph {title} {{\n  rankdir=TB;\n  node [shape=circle];\n  0 [label="init"];\n')
    for source, target, text, _ in path_edges(records):
        style = ", color=red, fontcolor=red" if highlight is not None and source == highlight else ""
        file.write(
            f"  {target} [label={_dot_string(str(target))}];\n"
            f"  {source} -> {target} [label={_dot_string(text)}{style}];\n"
        )
    file.write("}\n")


def _xml(text: str) -> str:
    """``text`` escaped for XML character data, with characters XML cannot hold as ``\\uXXXX``."""
    return escape(_NOT_XML.sub(lambda found: f"\\u{ord(found.group()):04x}", text))


def write_graphml(header: Mapping[str, Any], records: Iterable[Record], file: IO[str]) -> None:
    """The trace's path in GraphML (keys: ``label`` on nodes and edges, ``actor``, ``action``)."""
    file.write(f'<?xml version="1.0" encoding="UTF-8"?>\n<graphml xmlns="{GRAPHML_NAMESPACE}">\n')
    for key, owner in (("label", "node"), ("elabel", "edge"), ("actor", "edge"), ("action", "edge")):
        name = "label" if key == "elabel" else key
        file.write(f'<key id="{key}" for="{owner}" attr.name="{name}" attr.type="string" />\n')
    graph_id = quoteattr(_NOT_XML.sub("?", str(header["protocol"])))
    file.write(f'<graph id={graph_id} edgedefault="directed">\n<node id="n0"><data key="label">init</data></node>\n')
    for source, target, text, event in path_edges(records):
        file.write(
            f'<node id="n{target}"><data key="label">{target}</data></node>\n'
            f'<edge id="e{source}" source="n{source}" target="n{target}"><data key="elabel">{_xml(text)}</data>'
            f'<data key="actor">{_xml(str(event["actor"]))}</data>'
            f'<data key="action">{_xml(str(event["action"]))}</data>'
            "</edge>\n"
        )
    file.write("</graph>\n</graphml>\n")
