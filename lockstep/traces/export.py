"""Exporting a trace for other tools: Chrome/Perfetto trace events, and the trace's path as a graph.

- ``perfetto``: the Chrome trace-event JSON that ui.perfetto.dev and chrome://tracing open. One
  process, one track (thread) per actor, named by ``M`` metadata events. Time is the event index
  (10 µs per event, so the picture shows causal order, not wall time). A collective's ``enter``
  and ``complete`` are a ``B``/``E`` duration slice on the member's track named
  ``op(communicator)#n``, and the members' slices of one op are joined by a flow (``s`` at the
  first enter, ``t`` at the others), so a collective reads as one arrow across ranks. Every other
  event is an ``X`` slice of 10 µs with its arguments; an ``enter`` that never completes (a hang)
  is closed at the end and marked ``(never completed)``.
- ``dot`` and ``graphml``: the run as a path graph: node i is the state after event i (node 0 the
  initial state), edge i → i+1 is labelled ``actor: action(args)``.

Only the standard library is used (JSON, XML); input is the stream of validated records.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any
from xml.etree import ElementTree

from lockstep.traces.reader import Record

TICK = 10  # µs per event


def _label(event: Mapping[str, Any]) -> str:
    arguments = ", ".join(f"{name}={json.dumps(value, separators=(',', ':'))}" for name, value in event["args"].items())
    return f"{event['action']}({arguments})" if arguments else str(event["action"])


def _collective(event: Mapping[str, Any]) -> tuple[str, int] | None:
    if event["action"] not in ("enter", "complete"):
        return None
    clock = event.get("clock") or {}
    communicator = event["args"].get("communicator")
    if communicator is None and len(clock) == 1:
        communicator = next(iter(clock))
    if not isinstance(communicator, str) or communicator not in clock:
        return None
    return communicator, int(clock[communicator])


def to_perfetto(header: Mapping[str, Any], records: Iterable[Record], highlight: int | None = None) -> dict[str, Any]:
    """The trace as Chrome trace-event JSON; ``highlight`` marks one event (e.g. a violation)."""
    title = f"lockstep {header['protocol']} {header['variant']} {header.get('instance') or ''}".strip()
    events: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": title}}]
    tracks: dict[str, int] = {}
    open_slices: dict[tuple[str, str], tuple[int, str]] = {}  # (actor, communicator) -> (ts, name)
    flows: dict[tuple[str, int], int] = {}
    last = 0

    def track(actor: str) -> int:
        if actor not in tracks:
            tracks[actor] = len(tracks) + 1
            events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tracks[actor], "args": {"name": actor}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": tracks[actor], "args": {"sort_index": tracks[actor]}})
        return tracks[actor]

    for record in records:
        event = record.event
        index, actor = int(event["index"]), str(event["actor"])
        tid, ts = track(actor), index * TICK
        last = ts
        arguments = {"index": index, **event["args"], **({"observed": event["observed"]} if event.get("observed") else {})}
        collective = _collective(event)
        if collective is not None:
            communicator, number = collective
            op = event["args"].get("op", "collective")
            name = f"{op}({communicator})#{number}"
            if event["action"] == "enter":
                open_slices[(actor, communicator)] = (ts, name)
                events.append({"ph": "B", "name": name, "cat": "collective", "pid": 1, "tid": tid, "ts": ts, "args": arguments})
                phase = "t" if collective in flows else "s"  # the op's first enter starts its flow
                flow_id = flows.setdefault(collective, len(flows) + 1)
                events.append({"ph": phase, "name": name, "cat": "collective", "id": flow_id, "pid": 1, "tid": tid, "ts": ts, "bp": "e"})
            else:
                open_slices.pop((actor, communicator), None)
                events.append({"ph": "E", "pid": 1, "tid": tid, "ts": ts + TICK, "args": arguments})
            continue
        slice_ = {"ph": "X", "name": _label(event), "cat": actor.split(":")[0], "pid": 1, "tid": tid, "ts": ts, "dur": TICK, "args": arguments}
        if highlight is not None and index == highlight:
            slice_["cname"] = "terrible"
            slice_["name"] = f"✗ {slice_['name']}"
        events.append(slice_)
    for (actor, _), (_, name) in sorted(open_slices.items()):
        events.append({"ph": "E", "pid": 1, "tid": tracks[actor], "ts": last + 2 * TICK, "args": {"note": f"{name} never completed"}})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"lockstep": dict(header)}}


def path_edges(records: Iterable[Record]) -> list[tuple[int, int, str, Mapping[str, Any]]]:
    """The run as a path: (source node, target node, label, event) per event."""
    return [(int(record.event["index"]), int(record.event["index"]) + 1, f"{record.event['actor']}: {_label(record.event)}", record.event) for record in records]


def _dot_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(header: Mapping[str, Any], records: Iterable[Record], highlight: int | None = None) -> str:
    """The trace's path in Graphviz DOT."""
    edges = path_edges(records)
    lines = [f"digraph {_dot_string(str(header['protocol']) + ' ' + str(header['variant']))} {{", "  rankdir=TB;", "  node [shape=circle];"]
    lines.append('  0 [label="init"];')
    for source, target, label, _ in edges:
        style = ", color=red, fontcolor=red" if highlight is not None and source == highlight else ""
        lines.append(f"  {target} [label={_dot_string(str(target))}];")
        lines.append(f"  {source} -> {target} [label={_dot_string(label)}{style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_graphml(header: Mapping[str, Any], records: Iterable[Record]) -> str:
    """The trace's path in GraphML (keys: ``label`` on nodes and edges, ``actor``, ``action``)."""
    namespace = "http://graphml.graphdrawing.org/xmlns"
    ElementTree.register_namespace("", namespace)
    root = ElementTree.Element(f"{{{namespace}}}graphml")
    for key, owner in (("label", "node"), ("elabel", "edge"), ("actor", "edge"), ("action", "edge")):
        name = "label" if key == "elabel" else key
        ElementTree.SubElement(root, f"{{{namespace}}}key", {"id": key, "for": owner, "attr.name": name, "attr.type": "string"})
    graph = ElementTree.SubElement(root, f"{{{namespace}}}graph", {"id": f"{header['protocol']}", "edgedefault": "directed"})

    def node(identifier: int, label: str) -> None:
        element = ElementTree.SubElement(graph, f"{{{namespace}}}node", {"id": f"n{identifier}"})
        ElementTree.SubElement(element, f"{{{namespace}}}data", {"key": "label"}).text = label

    node(0, "init")
    for source, target, label, event in path_edges(records):
        node(target, str(target))
        edge = ElementTree.SubElement(graph, f"{{{namespace}}}edge", {"id": f"e{source}", "source": f"n{source}", "target": f"n{target}"})
        for key, value in (("elabel", label), ("actor", str(event["actor"])), ("action", str(event["action"]))):
            ElementTree.SubElement(edge, f"{{{namespace}}}data", {"key": key}).text = value
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"
