"""The vocabulary of a protocol: every name and value a trace of it may use, derived from its ``Machine``.

A ``Vocabulary`` is read off the built, finished machine of one variant at one set of parameter
values (the ones a trace's header carries), so it can never disagree with the model that replays
the trace:

- ``actions``: each action's name, actor template, and parameter names with their sorts;
- ``variables``: each state variable's sort; ``entry(variable, key)`` names an observed entry
  (``entry("mode", 1)`` is ``"mode[1]"``, ``entry("requests")`` the whole variable), checking the
  variable and the key, so recorders name state without writing JSON keys by hand, and
  ``entries(variable)`` lists every entry's name with its key (for readers of recordings);
- ``variants``: the protocol's variant names; ``communicators``: each communicator's op names.

Recorders (``lockstep.traces.recorder.EventRecorder`` and so the runtime's ``Recorder`` and
``lockstep.record.TraceRecorder``) check every event through ``check_action``,
``check_collective`` and ``check_observed``: the first use of an action, argument, observed name or
value the model does not have raises ``VocabularyError`` naming it and what the model has. Values
are read as replay reads them (``lockstep.spec.trace_values.decode``). Checks remember what they
passed (up to a bound), so a runtime's hot path pays a set lookup per event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lockstep.spec.collectives import Communicator
from lockstep.spec.machine import Machine
from lockstep.spec.sorts import MapSort, Sort
from lockstep.spec.trace_values import ValueMismatch, decode, decode_key

if TYPE_CHECKING:
    from lockstep.spec.protocol import Protocol

_REMEMBERED = 1 << 16  # checked events and observed values remembered per vocabulary


class VocabularyError(ValueError):
    """A name or value a recorder used that the protocol's model does not have."""


@dataclass(frozen=True)
class ActionSignature:
    """An action as a trace names it: its actor template and its parameters' sorts, in order."""

    name: str
    actor: str
    parameters: Mapping[str, Sort]


class Vocabulary:
    """The names, sorts and variants of one protocol variant at one set of parameter values."""

    def __init__(self, machine: Machine, protocol: str, variant: str, variants: tuple[str, ...]) -> None:
        if not machine.finished:
            raise VocabularyError(f"the vocabulary of {machine.name} needs the finished machine (call finish())")
        self.model = machine.name
        self.protocol = protocol
        self.variant = variant
        self.variants = variants
        self.actions: Mapping[str, ActionSignature] = {
            action.name: ActionSignature(
                action.name, action.actor, {parameter.name: parameter.sort for parameter in action.parameters}
            )
            for action in machine.actions
        }
        self.variables: Mapping[str, Sort] = {name: variable.sort for name, variable in machine.variables.items()}
        self.communicators: Mapping[str, tuple[str, ...]] = {
            communicator.name: tuple(communicator.specs)
            for communicator in machine.communicators
            if isinstance(communicator, Communicator)
        }
        self._passed: set[object] = set()

    @classmethod
    def of(cls, protocol: Protocol, variant: str, parameters: Mapping[str, object] | None = None) -> Vocabulary:
        """The vocabulary of ``protocol``'s ``variant`` with ``parameters`` over its defaults (keys that
        are not the protocol's integer parameters, such as a run's own settings, are ignored)."""
        protocol.variant(variant)  # a UsageError naming the variants there are
        values = {parameter.name: parameter.default for parameter in protocol.parameters}
        given = parameters or {}
        for spec in protocol.parameters:
            value = given.get(spec.name)
            if not isinstance(value, int) or isinstance(value, bool):
                continue
            problem = spec.range_problem(value)
            if problem is not None:
                raise VocabularyError(f"parameter {spec.name} of {protocol.name} {problem}")
            values[spec.name] = value
        for spec in protocol.parameters:  # derived defaults follow the values they derive from
            if spec.derived is not None and spec.name not in given:
                values[spec.name] = spec.derived(values)
        machine = protocol.machine(variant, values)
        return cls(machine, protocol.name, variant, tuple(spec.name for spec in protocol.variants))

    # ----------------------------------------------------------------------------------- naming
    def action(self, name: str) -> ActionSignature:
        """The action called ``name``; a ``VocabularyError`` listing the actions there are."""
        signature = self.actions.get(name)
        if signature is None:
            raise VocabularyError(f"{self.model} has no action {name!r}; its actions: {', '.join(self.actions)}")
        return signature

    def entry(self, variable: str, key: object = None) -> str:
        """The observed name of ``variable`` (``key`` None) or of its map entry at ``key`` (a model
        value of the key sort, or its rendered name): ``entry("mode", 1) == "mode[1]"``."""
        sort = self.variables.get(variable)
        if sort is None:
            raise VocabularyError(
                f"{self.model} has no variable {variable!r}; its variables: {', '.join(self.variables)}"
            )
        if key is None:
            return variable
        if not isinstance(sort, MapSort):
            raise VocabularyError(
                f"{self.model}: variable {variable!r} of sort {sort.name} is not a map; it has no entries"
            )
        where = f"entry {variable}[{key}]"
        try:
            if isinstance(key, str):
                position = decode_key(sort, key, where)
            else:
                position = sort.keys.index(decode(sort.key, key, where))
        except (ValueMismatch, ValueError) as error:
            raise VocabularyError(f"{self.model}: {error}") from None
        return f"{variable}[{sort.key.render(sort.keys[position])}]"

    def entries(self, variable: str) -> dict[str, object]:
        """Every observed name of map ``variable``'s entries with its key, a model value of the key
        sort: ``entries("mode") == {"mode[0]": 0, "mode[1]": 1}`` (for a reader of recordings)."""
        sort = self.variables.get(variable)
        if not isinstance(sort, MapSort):
            self.entry(variable, 0)  # the VocabularyError naming what is wrong
            raise AssertionError("unreachable")  # pragma: no cover
        return {f"{variable}[{sort.key.render(key)}]": key for key in sort.keys}

    # ---------------------------------------------------------------------------------- checking
    def check_action(self, action: str, args: Mapping[str, object]) -> None:
        """``action`` with ``args`` (some or all of its parameters) is an action of the model with
        values of their sorts; else a ``VocabularyError`` naming the first thing that is not."""
        key = _remembered_key("action", action, args)
        if key is not None and key in self._passed:
            return
        signature = self.action(action)
        for name, value in args.items():
            sort = signature.parameters.get(name)
            if sort is None:
                known = ", ".join(signature.parameters) or "none"
                raise VocabularyError(
                    f"action {action!r} of {self.model} has no parameter {name!r}; its parameters: {known}"
                )
            try:
                decode(sort, value, f"action {action!r}: args.{name}")
            except ValueMismatch as error:
                raise VocabularyError(str(error)) from None
        self._remember(key)

    def check_collective(self, communicator: str, op: str) -> None:
        """``op`` is an op of the model's ``communicator``; else a ``VocabularyError``."""
        ops = self.communicators.get(communicator)
        if ops is None:
            known = ", ".join(self.communicators) or "none"
            raise VocabularyError(f"{self.model} has no communicator {communicator!r}; its communicators: {known}")
        if op not in ops:
            raise VocabularyError(
                f"communicator {communicator!r} of {self.model} has no op {op!r}; its ops: {', '.join(ops)}"
            )

    def check_observed(self, name: str, value: object) -> None:
        """``name`` is a variable or a map entry (``mode[1]``) of the model and ``value`` a value of
        its sort; else a ``VocabularyError``."""
        key = _remembered_key("observed", name, value)
        if key is not None and key in self._passed:
            return
        try:
            decode(self.sort_of(name), value, f"observed {name}")
        except ValueMismatch as error:
            raise VocabularyError(str(error)) from None
        self._remember(key)

    def sort_of(self, name: str) -> Sort:
        """The sort of an observed name: a variable's, or a map entry's value sort."""
        sort = self.variables.get(name)
        if sort is not None:
            return sort
        base, bracket, rest = name.partition("[")
        if bracket and rest.endswith("]"):
            self.entry(base, rest[:-1])  # checks the variable, that it is a map, and the key
            whole = self.variables[base]
            assert isinstance(whole, MapSort)
            return whole.value
        raise VocabularyError(f"{self.model} has no variable {name!r}; its variables: {', '.join(self.variables)}")

    def _remember(self, key: object) -> None:
        if key is not None and len(self._passed) < _REMEMBERED:
            self._passed.add(key)


def _remembered_key(kind: str, name: str, value: object) -> object:
    """What a passed check is remembered by: ``value`` frozen with each scalar's type (``True`` and
    ``1`` differ), or None when it cannot be hashed."""
    try:
        frozen = (kind, name, _frozen(value))
        hash(frozen)
    except TypeError:
        return None
    return frozen


def _frozen(value: object) -> object:
    if isinstance(value, (list, tuple)):
        return ("list", *(_frozen(item) for item in value))
    if isinstance(value, Mapping):
        return ("object", *sorted((str(name), _frozen(item)) for name, item in value.items()))
    return (type(value), value)


__all__ = ["ActionSignature", "Vocabulary", "VocabularyError"]
