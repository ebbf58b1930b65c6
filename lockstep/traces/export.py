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
  before it). Every other event is an ``X`` slice of 10 µs titled by its action alone (Perfetto
  groups and counts slices by title), its arguments and observed values in the slice's ``args``;
  an ``enter`` that never completes (a hang) is closed at the end and marked ``(never completed)``.
- ``write_dot`` and ``write_graphml``: the run as a path graph: node i is the state after event i
  (node 0 the initial state), edge i → i+1 is labelled ``actor: action(args)``. In DOT each state
  lists the variables its step changed.

What only a model knows comes in ``Annotations`` (built by ``lockstep.checkers.export``): where the
run goes wrong (a ``Violation``: the property and its sentence, or a divergence), each step's
changed variables as ``old → new``, and counter samples of the variables the violated property
reads. With them the Perfetto export has an instant event (``i``, global scope) after the failing
event, whose slice is marked, and a counter track (``C``) per such variable, numbers over time (enum
members by position, named in the track's title); the DOT export is titled with the violated
property and its sentence and draws the failing state red. Without them the writers need no model:
DOT lists each step's observed values.

Only the standard library is used (JSON, XML escaping).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any
from xml.sax.saxutils import escape, quoteattr

from lockstep.traces.reader import Record

TICK = 10  # µs per event
GRAPHML_NAMESPACE = "http://graphml.graphdrawing.org/xmlns"
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
# characters XML 1.0 cannot hold even escaped; written as \uXXXX text instead
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


@dataclass(frozen=True)
class StepNotes:
    """What a model adds to one state of a trace's export: the variables its step changed, as
    ``name: old → new`` lines, and counter samples ``(track title, {series: number})``."""

    changes: tuple[str, ...] = ()
    counters: tuple[tuple[str, Mapping[str, float]], ...] = ()


@dataclass(frozen=True)
class Violation:
    """Where a run goes wrong, for an export to mark: after event ``event`` (None: after the last
    event, as in a model counterexample), a violated ``property`` (None: a divergence) whose
    ``title`` and ``description`` (the property's sentence) are shown."""

    title: str
    description: str = ""
    property: str | None = None
    event: int | None = None


@dataclass(frozen=True)
class Annotations:
    """What a model adds to a trace's export: the violation, the initial state's notes, and a
    function giving each event's (called once per event, in order)."""

    violation: Violation | None = None
    initial: StepNotes = field(default_factory=StepNotes)
    step: Callable[[Mapping[str, Any]], StepNotes] | None = None

    def after(self, event: Mapping[str, Any]) -> StepNotes:
        return StepNotes() if self.step is None else self.step(event)


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


def _counter_events(notes: StepNotes, ts: int) -> Iterator[dict[str, Any]]:
    for name, series in notes.counters:
        yield {"ph": "C", "name": name, "pid": 1, "tid": 0, "ts": ts, "args": dict(series)}


def _violation_event(violation: Violation, tid: int, ts: int, event: int | None) -> dict[str, Any]:
    """An instant event across every track (global scope) where the run goes wrong."""
    arguments: dict[str, Any] = {"after event": event}
    if violation.property is not None:
        arguments["property"] = violation.property
    if violation.description:
        arguments["description"] = violation.description
    return {"ph": "i", "s": "g", "name": f"✗ {violation.title}", "pid": 1, "tid": tid, "ts": ts, "args": arguments}


def perfetto_events(
    header: Mapping[str, Any],
    records: Iterable[Record],
    highlight: int | None = None,
    annotations: Annotations | None = None,
) -> Iterator[dict[str, Any]]:
    """The trace's Chrome trace events, one at a time; ``highlight`` marks one event (e.g. a violation),
    ``annotations`` add the violation's instant event and counter tracks (see the module doc)."""
    notes = annotations or Annotations()
    violation = notes.violation
    if violation is not None and violation.event is not None:
        highlight = violation.event
    title = f"lockstep {header['protocol']} {header['variant']} {header.get('instance') or ''}".strip()
    yield {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": title}}
    yield from _counter_events(notes.initial, 0)
    tracks: dict[str, int] = {}
    open_slices: dict[tuple[str, str], tuple[int, str]] = {}  # (actor, communicator) -> (ts, name)
    flows: dict[tuple[str, int], int] = {}  # ops entered and not yet completed -> flow id
    flows_started = 0
    last = 0
    last_index: int | None = None
    last_tid = 0
    for record in records:
        event = record.event
        index, actor = int(event["index"]), str(event["actor"])
        tid = tracks.get(actor)
        if tid is None:
            tid = tracks[actor] = len(tracks) + 1
            yield {"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": actor}}
            yield {"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": tid, "args": {"sort_index": tid}}
        ts = last = index * TICK
        last_index, last_tid = index, tid
        yield from _counter_events(notes.after(event), ts + TICK)
        if violation is not None and violation.event == index:
            yield _violation_event(violation, tid, ts + TICK, index)
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
            "name": str(event["action"]),
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
    if violation is not None and violation.event is None:  # after the last event (a model counterexample)
        yield _violation_event(violation, last_tid, 0 if last_index is None else last + TICK, last_index)


def write_perfetto(
    header: Mapping[str, Any],
    records: Iterable[Record],
    file: IO[str],
    highlight: int | None = None,
    annotations: Annotations | None = None,
) -> None:
    """The trace as one Chrome trace-event JSON document, one trace event per line."""
    file.write('{"traceEvents":[\n')
    separator = ""
    for event in perfetto_events(header, records, highlight, annotations):
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


def _observed_lines(event: Mapping[str, Any]) -> tuple[str, ...]:
    """Without a model: the values an event observed, ``name = value`` (compact JSON, cut at 60 characters)."""
    lines = []
    for name, value in (event.get("observed") or {}).items():
        text = _COMPACT(value)
        lines.append(f"{name} = {text if len(text) <= 60 else text[:59] + '…'}")
    return tuple(lines)


def write_dot(
    header: Mapping[str, Any],
    records: Iterable[Record],
    file: IO[str],
    highlight: int | None = None,
    annotations: Annotations | None = None,
) -> None:
    """The trace's path in Graphviz DOT: each state with its step's changed variables (the model's
    ``old → new`` where ``annotations`` give them, else the observed values), the graph titled with
    the violated property and its sentence, and the failing step and state in red."""
    notes = annotations or Annotations()
    violation = notes.violation
    if violation is not None and violation.event is not None:
        highlight = violation.event
    name = str(header["protocol"]) + " " + str(header["variant"])
    title = f"{name} {header.get('instance') or ''}".strip()
    if violation is not None:
        where = "at the end" if violation.event is None else f"after event {violation.event}"
        title += f"\n✗ {violation.title} {where}" + (f": {violation.description}" if violation.description else "")
    file.write(
        f"digraph {_dot_string(name)} {{\n  label={_dot_string(title)};\n  labelloc=t;\n  rankdir=TB;\n"
        '  node [shape=box, fontname=monospace];\n  0 [label="init"];\n'
    )
    failing = ', color=red, fontcolor=red, style="filled,bold", fillcolor="#fde2e2"'
    pending = ""  # the newest state's line, written once the next event shows it is not the last
    for source, target, text, event in path_edges(records):
        changes = notes.after(event).changes if notes.step is not None else _observed_lines(event)
        failed_here = highlight is not None and source == highlight
        style = ", color=red, fontcolor=red" if failed_here else ""
        file.write(f"{pending}];\n" if pending else "")
        file.write(f"  {source} -> {target} [label={_dot_string(text)}{style}];\n")
        pending = (
            f"  {target} [label={_dot_string(chr(10).join([str(target), *changes]))}{failing if failed_here else ''}"
        )
    at_end = violation is not None and violation.event is None  # a model counterexample fails in its last state
    file.write((f"{pending}{failing if at_end else ''}];\n" if pending else "") + "}\n")


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
