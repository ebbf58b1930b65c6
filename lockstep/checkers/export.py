"""Exports that need the model: ITF traces (full states) and a protocol instance's state graph.

- ``write_itf``: the Informal Trace Format of Apalache and Quint (ADR-015): ``vars``, then one
  object per state with every variable, written as a stream (one state per line, as its event is
  read; ``#meta``, which counts the events, comes last), so memory stays flat in the trace's
  length. Values follow the model's sorts: Booleans as JSON Booleans, integers as
  ``{"#bigint": "n"}``, enum members as strings, maps as ``{"#map": [[key, value], ...]}``,
  sequences as arrays, records as objects. A trace has full
  states when the model's semantics give them: a model counterexample (``source.kind`` =
  ``model``) records every variable an event changed, so its states are the model's initial state
  updated event by event; a runtime trace has full states only if every event observes every
  variable. Otherwise ``ExportError`` (the CLI's exit 2). A lasso's ``loop_start`` becomes ITF's
  ``loop``. Monitor counters, which are the checker's bookkeeping, are left out.
- ``state_graph``: the reachable states of an instance (explicit BFS, optionally capped) as a
  networkx ``DiGraph``: node attributes ``label`` (the state's non-monitor variables),
  ``fingerprint``, ``initial``; edge attribute ``label`` (``action(args)``, every enabled
  transition). ``to_dot`` writes any such graph in Graphviz DOT.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any

import networkx as nx

from lockstep.checkers.explicit import ExplicitSearch
from lockstep.checkers.limits import Limits
from lockstep.checkers.trace_values import ValueMismatch, decode
from lockstep.spec.machine import Machine
from lockstep.spec.semantics import InterpretedSystem, State, fingerprint, unpack
from lockstep.spec.sorts import BoolSort, EnumSort, IndexSort, IntSort, MapSort, RecordSort, SequenceSort, Sort, Value
from lockstep.traces.reader import Record


class ExportError(ValueError):
    """The trace cannot be exported in the asked format (the CLI's exit code 2)."""


def itf_value(sort: Sort, value: Value) -> Any:
    """``value`` of ``sort`` in ITF's JSON encoding."""
    if isinstance(sort, BoolSort):
        return bool(value)
    if isinstance(sort, (IntSort, IndexSort)):
        return {"#bigint": str(value)}
    if isinstance(sort, EnumSort):
        return sort.members[int(value)]  # type: ignore[call-overload]
    if isinstance(sort, MapSort):
        assert isinstance(value, tuple)
        return {
            "#map": [
                [itf_value(sort.key, key), itf_value(sort.value, item)] for key, item in zip(sort.key.values(), value)
            ]
        }
    if isinstance(sort, SequenceSort):
        assert isinstance(value, tuple)
        return [itf_value(sort.element, item) for item in value]
    if isinstance(sort, RecordSort):
        assert isinstance(value, tuple)
        return {name: itf_value(field_sort, item) for (name, field_sort), item in zip(sort.fields, value)}
    raise ExportError(f"no ITF encoding for sort {sort!r}")  # pragma: no cover - every sort is listed


def itf_states(machine: Machine, header: Mapping[str, Any], records: Iterable[Record]) -> Iterator[str]:
    """The trace's states as ITF JSON texts, the initial one first, one per event after it, one at a
    time; ``ExportError`` at the first event whose state is not full. A variable's JSON is encoded
    again only when an event changes it."""
    names = [name for name, variable in machine.variables.items() if not variable.monitor]
    sorts = {name: machine.variables[name].sort for name in names}
    from_model = header["source"]["kind"] == "model"
    initial = machine.initial_state()
    encoded = {name: _itf_json(sorts[name], initial[name]) for name in names}
    keys = {name: json.dumps(name) for name in names}

    def state(index: int) -> str:
        return f'{{"#meta":{{"index":{index}}},' + ",".join(f"{keys[name]}:{encoded[name]}" for name in names) + "}"

    yield state(0)
    for count, record in enumerate(records, start=1):
        observed = record.event.get("observed") or {}
        if not from_model and len(observed) < len(names):
            missing = [name for name in names if name not in observed]
            if missing:
                raise ExportError(
                    f"{record.path}:{record.line}: ITF needs full states; this {header['source']['kind']} trace's "
                    f"event {record.event['index']} does not observe {', '.join(missing[:3])}"
                    f"{'…' if len(missing) > 3 else ''}"
                )
        for name, value in observed.items():
            if name not in machine.variables:
                raise ExportError(f"{record.path}:{record.line}: the model has no variable {name!r}")
            try:
                decoded = decode(machine.variables[name].sort, value, f"observed {name}")
            except ValueMismatch as error:
                raise ExportError(f"{record.path}:{record.line}: {error}") from None
            if name in encoded:
                encoded[name] = _itf_json(sorts[name], decoded)
        yield state(count)


def _itf_json(sort: Sort, value: Value) -> str:
    return json.dumps(itf_value(sort, value), separators=(",", ":"))


def write_itf(machine: Machine, header: Mapping[str, Any], records: Iterable[Record], file: IO[str]) -> None:
    """The trace as an ITF document written to ``file`` as it is read; ``ExportError`` if its states
    are not full (the caller discards what was written)."""
    names = [name for name, variable in machine.variables.items() if not variable.monitor]
    file.write('{"vars":' + json.dumps(names) + ',\n"states":[\n')
    events = -1
    for events, state in enumerate(itf_states(machine, header, records)):
        file.write(state if events == 0 else ",\n" + state)
    meta = {
        "format": "ITF",
        "format-description": "https://apalache-mc.org/docs/adr/015adr-trace.html",
        "source": f"lockstep {header['protocol']} {header['variant']} {header.get('instance') or ''}".strip(),
        "description": f"{header['source']['kind']} trace of {events} events",
    }
    file.write('\n],\n"#meta":' + json.dumps(meta))
    loop = header.get("parameters", {}).get("loop_start")
    if isinstance(loop, int) and not isinstance(loop, bool):
        file.write(f',\n"loop":{loop}')
    file.write("}\n")


def _render_state(machine: Machine, state: State) -> str:
    values = unpack(machine, state)
    return "\n".join(
        f"{name} = {variable.sort.render(values[name])}"
        for name, variable in machine.variables.items()
        if not variable.monitor
    )


def state_graph(machine: Machine, max_states: int | None = None) -> tuple[nx.DiGraph, bool]:
    """The reachable state graph and whether it is complete (False when ``max_states`` cut it)."""
    search = ExplicitSearch(InterpretedSystem(machine), limits=Limits(max_states=max_states), keep_edges=True)
    result = search.run()
    assert search.edges is not None
    graph: nx.DiGraph = nx.DiGraph(name=machine.name)
    for state_id, state in enumerate(search.states):
        graph.add_node(
            state_id, label=_render_state(machine, state), fingerprint=fingerprint(state), initial=state_id == 0
        )
    for source, edges in enumerate(search.edges):
        for action_position, arguments, target in edges:
            action = machine.actions[action_position]
            rendered = ", ".join(
                f"{parameter.name}={parameter.sort.render(value)}"
                for parameter, value in zip(action.parameters, arguments)
            )
            label = f"{action.name}({rendered})" if rendered else action.name
            if graph.has_edge(source, target):
                graph.edges[source, target]["label"] += f"\n{label}"
            else:
                graph.add_edge(source, target, label=label)
    complete = result.stopped is None
    return graph, complete


def _quoted(text: object) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(graph: nx.DiGraph) -> str:
    """A networkx graph with ``label`` attributes in Graphviz DOT."""
    lines = [f"digraph {_quoted(graph.graph.get('name', 'lockstep'))} {{", "  node [shape=box, fontname=monospace];"]
    for node, data in graph.nodes(data=True):
        extra = ", peripheries=2" if data.get("initial") else ""
        lines.append(f"  {node} [label={_quoted(data.get('label', node))}{extra}];")
    for source, target, data in graph.edges(data=True):
        lines.append(f"  {source} -> {target} [label={_quoted(data.get('label', ''))}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
