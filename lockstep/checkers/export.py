"""Exports that need the model: ITF traces (full states), what a model adds to a trace's other
exports, and a protocol instance's state graph.

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
  ``loop``. Monitor counters, which are the checker's bookkeeping, are left out. Every state also
  carries the two variables of Quint's ``--mbt`` traces, which model-based-testing drivers
  (quint-connect and the like) read to replay a trace step by step: ``mbt::actionTaken``, the
  action that led to the state (``"init"`` for the first), and ``mbt::nondetPicks``, a record of
  that action's arguments, each as Quint writes a picked value, ``{"tag": "Some", "value": v}``
  (the arguments of other actions, which Quint lists as ``None``, are left out: such readers take
  a missing pick as none).
- ``trace_annotations``: what the model adds to a trace's Perfetto and DOT exports
  (``lockstep.traces.export.Annotations``): the violation, each step's changed variables
  ``old → new`` (the model's state followed through the events' observed values), and counter
  samples of the variables the violated property reads; ``property_reads`` names those.
- ``state_graph``: the reachable states of an instance (explicit BFS, optionally capped) as a
  networkx ``DiGraph``: node attributes ``label`` (the state's non-monitor variables),
  ``fingerprint``, ``initial``, ``violates`` (the safety properties false there, comma-separated;
  "" for none: an ``always`` property, or ``no_deadlock`` and a property's deadlock condition in a
  state with no successor); edge attribute ``label`` (``action(args)``, every enabled transition).
  ``to_dot`` writes any such graph in Graphviz DOT, violating states filled red and named.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any

import networkx as nx

from lockstep.checkers.counterexample import changes
from lockstep.checkers.explicit.search import ExplicitSearch
from lockstep.checkers.limits import Limits
from lockstep.spec.definitions import PropertyKind
from lockstep.spec.expressions import variables_of
from lockstep.spec.machine import Machine
from lockstep.spec.semantics import InterpretedSystem, State, fingerprint, unpack
from lockstep.spec.sorts import BoolSort, EnumSort, IndexSort, IntSort, MapSort, RecordSort, SequenceSort, Sort, Value
from lockstep.spec.trace_values import ValueMismatch, decode, decode_key
from lockstep.traces.export import Annotations, StepNotes, Violation
from lockstep.traces.reader import Record

ACTION_TAKEN, NONDET_PICKS = "mbt::actionTaken", "mbt::nondetPicks"  # Quint's --mbt variables
NO_DEADLOCK = "no_deadlock"


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


def _itf_plain(value: Any) -> Any:
    """A trace JSON value the model has no sort for (a runtime-only event's argument) in ITF."""
    if isinstance(value, bool) or isinstance(value, str) or value is None:
        return value if value is not None else {"#tup": []}
    if isinstance(value, int):
        return {"#bigint": str(value)}
    if isinstance(value, list):
        return [_itf_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(name): _itf_plain(item) for name, item in value.items()}
    return {"#unserializable": str(value)}


def nondet_picks(machine: Machine, record: Record) -> dict[str, Any]:
    """The event's arguments as Quint's ``mbt::nondetPicks`` record: each a ``Some`` of its ITF value,
    by the model's sort where the model has the action; ``ExportError`` for an argument beyond it."""
    event = record.event
    arguments: Mapping[str, Any] = event["args"]
    try:
        action = machine.action_named(str(event["action"]))
    except KeyError:
        return {name: {"tag": "Some", "value": _itf_plain(value)} for name, value in arguments.items()}
    picks: dict[str, Any] = {}
    for parameter in action.parameters:
        if parameter.name not in arguments:
            continue
        try:
            value = decode(parameter.sort, arguments[parameter.name], f"argument {parameter.name}")
        except ValueMismatch as error:
            raise ExportError(f"{record.path}:{record.line}: {error}") from None
        picks[parameter.name] = {"tag": "Some", "value": itf_value(parameter.sort, value)}
    return picks


def itf_states(machine: Machine, header: Mapping[str, Any], records: Iterable[Record]) -> Iterator[str]:
    """The trace's states as ITF JSON texts, the initial one first, one per event after it, one at a
    time, each with Quint's ``mbt::actionTaken`` and ``mbt::nondetPicks``; ``ExportError`` at the
    first event whose state is not full. A variable's JSON is encoded again only when an event
    changes it."""
    names = [name for name, variable in machine.variables.items() if not variable.monitor]
    sorts = {name: machine.variables[name].sort for name in names}
    from_model = header["source"]["kind"] == "model"
    initial = machine.initial_state()
    encoded = {name: _itf_json(sorts[name], initial[name]) for name in names}
    keys = {name: json.dumps(name) for name in names}
    compact = json.JSONEncoder(separators=(",", ":")).encode

    def state(index: int, action: str, picks: Mapping[str, Any]) -> str:
        values = ",".join(f"{keys[name]}:{encoded[name]}" for name in names)
        taken = f'"{ACTION_TAKEN}":{compact(action)},"{NONDET_PICKS}":{compact(picks)}'
        return f'{{"#meta":{{"index":{index}}},{values}{"," if values else ""}{taken}}}'

    yield state(0, "init", {})
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
        yield state(count, str(record.event["action"]), nondet_picks(machine, record))


def _itf_json(sort: Sort, value: Value) -> str:
    return json.dumps(itf_value(sort, value), separators=(",", ":"))


def write_itf(machine: Machine, header: Mapping[str, Any], records: Iterable[Record], file: IO[str]) -> None:
    """The trace as an ITF document written to ``file`` as it is read; ``ExportError`` if its states
    are not full (the caller discards what was written)."""
    names = [name for name, variable in machine.variables.items() if not variable.monitor]
    file.write('{"vars":' + json.dumps([*names, ACTION_TAKEN, NONDET_PICKS]) + ',\n"states":[\n')
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


def property_reads(machine: Machine, name: str) -> tuple[str, ...]:
    """The state variables property ``name`` reads (its predicate, deadlock condition and trigger),
    in declaration order, monitor counters left out (a trace does not record them)."""
    prop = machine.property_named(name)
    read: set[str] = set()
    for expression in (prop.predicate, prop.at_deadlock, prop.trigger):
        if expression is not None:
            read |= variables_of(expression)
    return tuple(name for name, variable in machine.variables.items() if name in read and not variable.monitor)


def _numbers(sort: Sort, value: Value, prefix: str, into: dict[str, float]) -> None:
    """``value`` as counter series ``{name: number}``: scalars as numbers (enum members by position),
    a map or record per entry, a sequence by its length."""
    if isinstance(sort, (BoolSort, IntSort, IndexSort, EnumSort)):
        into[prefix or "value"] = int(value)  # type: ignore[call-overload]
    elif isinstance(sort, MapSort) and isinstance(value, tuple):
        for key, item in zip(sort.key.values(), value):
            _numbers(sort.value, item, f"{prefix}[{sort.key.render(key)}]", into)
    elif isinstance(sort, RecordSort) and isinstance(value, tuple):
        for (field_name, field_sort), item in zip(sort.fields, value):
            _numbers(field_sort, item, f"{prefix}.{field_name}" if prefix else field_name, into)
    elif isinstance(sort, SequenceSort) and isinstance(value, tuple):
        into[f"{prefix}.length" if prefix else "length"] = len(value)


def _enums(sort: Sort) -> list[EnumSort]:
    if isinstance(sort, EnumSort):
        return [sort]
    if isinstance(sort, MapSort):
        return _enums(sort.value)
    if isinstance(sort, RecordSort):
        return [found for _, field_sort in sort.fields for found in _enums(field_sort)]
    return []


def _track_title(name: str, sort: Sort) -> str:
    """A counter track's title: the variable, with its enum's members by position where it has one."""
    enums = {id(found): found for found in _enums(sort)}
    if len(enums) != 1:
        return name
    (members,) = (found.members for found in enums.values())
    return f"{name} ({', '.join(f'{position}={member}' for position, member in enumerate(members))})"


class _StateFollower:
    """The model's state along a trace: its initial state, updated by each event's observed values
    (a whole variable, or a map's entry ``name[key]``, as recorders write them)."""

    def __init__(self, machine: Machine, counted: Iterable[str]) -> None:
        self.machine = machine
        self.position = {name: position for position, name in enumerate(machine.variables)}
        initial = machine.initial_state()
        self.values: list[Value] = [initial[name] for name in machine.variables]
        self.counted = [name for name in counted if name in machine.variables]
        self.titles = {name: _track_title(name, machine.variables[name].sort) for name in self.counted}

    def counters(self, names: Iterable[str]) -> tuple[tuple[str, Mapping[str, float]], ...]:
        samples = []
        for name in names:
            series: dict[str, float] = {}
            _numbers(self.machine.variables[name].sort, self.values[self.position[name]], "", series)
            if series:
                samples.append((self.titles[name], series))
        return tuple(samples)

    def _observe(self, name: str, value: object) -> None:
        variables = self.machine.variables
        if name in variables:
            self.values[self.position[name]] = decode(variables[name].sort, value, name)
            return
        base, bracket, rest = name.partition("[")
        sort = variables[base].sort if base in variables else None
        if not (bracket and rest.endswith("]") and isinstance(sort, MapSort)):
            raise ValueMismatch(f"{self.machine.name} has no variable {name!r}")
        current = self.values[self.position[base]]
        assert isinstance(current, tuple)  # a map's value: its entries in key order
        entries = list(current)
        entries[decode_key(sort, rest[:-1], name)] = decode(sort.value, value, name)
        self.values[self.position[base]] = tuple(entries)

    def step(self, event: Mapping[str, Any]) -> StepNotes:
        before = tuple(self.values)
        unknown = []
        for name, value in (event.get("observed") or {}).items():
            try:
                self._observe(name, value)
            except ValueMismatch:  # not the model's: shown as recorded, not followed
                text = json.dumps(value, separators=(",", ":"))
                unknown.append(f"{name} = {text if len(text) <= 60 else text[:59] + '…'} (not the model's)")
        after = tuple(self.values)
        lines = [
            f"{change.variable}: {change.before} → {change.after}" for change in changes(self.machine, before, after)
        ]
        changed = [name for name in self.counted if before[self.position[name]] != after[self.position[name]]]
        return StepNotes(tuple(lines + unknown), self.counters(changed))


def trace_annotations(machine: Machine, violation: Violation | None) -> Annotations:
    """What ``machine`` adds to a trace's Perfetto and DOT exports: ``violation``, each step's
    changed variables, and counter samples of the variables the violated property reads (none for
    a divergence). The returned ``Annotations`` follow the trace's events in order, once."""
    reads: tuple[str, ...] = ()
    if violation is not None and violation.property is not None:
        try:
            reads = property_reads(machine, violation.property)
        except KeyError:  # a property the model does not have (the trace's, not this model's)
            reads = ()
    follower = _StateFollower(machine, reads)
    return Annotations(violation, StepNotes((), follower.counters(follower.counted)), follower.step)


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
    system = InterpretedSystem(machine)
    for state_id, state in enumerate(search.states):
        deadlocked = not search.edges[state_id] and not system.transitions(state)
        graph.add_node(
            state_id,
            label=_render_state(machine, state),
            fingerprint=fingerprint(state),
            initial=state_id == 0,
            violates=", ".join(violated_properties(system, state, deadlocked)),
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


def violated_properties(system: InterpretedSystem, state: State, deadlocked: bool) -> list[str]:
    """The safety properties false in ``state``: ``always`` properties, and where no action is
    enabled, ``no_deadlock`` (the state is not final) and the properties' deadlock conditions."""
    found = []
    for position, prop in enumerate(system.machine.properties):
        if prop.kind is not PropertyKind.ALWAYS:
            continue
        if prop.name == NO_DEADLOCK:
            if deadlocked and not system.is_final(state):
                found.append(prop.name)
        elif not system.holds(position, state) or (deadlocked and not system.holds_at_deadlock(position, state)):
            found.append(prop.name)
    return found


def _quoted(text: object) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(graph: nx.DiGraph) -> str:
    """A networkx graph with ``label`` attributes in Graphviz DOT; a node with ``violates`` filled red."""
    lines = [f"digraph {_quoted(graph.graph.get('name', 'lockstep'))} {{", "  node [shape=box, fontname=monospace];"]
    for node, data in graph.nodes(data=True):
        extra = ", peripheries=2" if data.get("initial") else ""
        label = str(data.get("label", node))
        if data.get("violates"):
            label = f"✗ violates {data['violates']}\n{label}"
            extra += ', color=red, fontcolor=red, style="filled,bold", fillcolor="#fde2e2"'
        lines.append(f"  {node} [label={_quoted(label)}{extra}];")
    for source, target, data in graph.edges(data=True):
        lines.append(f"  {source} -> {target} [label={_quoted(data.get('label', ''))}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
