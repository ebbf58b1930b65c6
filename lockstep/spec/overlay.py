"""Overlays: a change to a built-in model written as a few functions, checked by every engine.

A vLLM engineer's patch to, say, the pause path changes one or two functions that a model's actions
mirror. An overlay expresses that patch on the model's side without copying the model: it names a
built-in protocol and the variant of the release the patch is made on, and

- ``replace``-s actions by name: the new definition receives what the base action receives (the
  model's state and variant, then one Term per parameter, with the same sorts) and returns a
  ``Step``; it may call the base action's own function (import it from the model's module) and
  change its result;
- ``add``-s actions ``like`` an existing one (bound with the same context and parameter sorts, right
  after it);
- adds ``property``-s: a function of the machine and the model's state (the first argument every
  action of the base receives) that declares ``always``/``sometimes``/... properties.

``Overlay.protocol()`` is the base protocol with one more variant (the overlay's name, default
``overlay``), its default; so a file that assigns ``PROTOCOL = OVERLAY.protocol()`` is a model file
that ``lockstep check --model-file``, ``replay``, ``fuzz``, ``show`` and ``export`` accept. An action
the overlay binds says so: its ``mirrors`` begin with ``overlay NAME:``, which every counterexample
shows beside the step. A replacement or ``like`` that names no action of the base is a
``DefinitionError`` that lists the base's actions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lockstep.spec.actions import REBINDING, ActionDefinition
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import Protocol, VariantSpec
from lockstep.spec.terms import DefinitionError

PropertyFunction = Callable[[Machine, Any], None]


class _Binding:
    """The rebinding one build of the base model runs under (``REBINDING``)."""

    def __init__(self, overlay: Overlay) -> None:
        self.overlay = overlay
        self.bound: list[str] = []
        self.replaced: set[str] = set()
        self.state: Any = None  # the first context argument an action received: the model's state

    def replacement(self, definition: ActionDefinition[...], context: Sequence[object]) -> ActionDefinition[...]:
        if self.state is None and context:
            self.state = context[0]
        self.bound.append(definition.name)
        found = self.overlay.replaced.get(definition.name)
        if found is None:
            return definition
        self.replaced.add(definition.name)
        return self.overlay.marked(found, definition)

    def companions(self, name: str) -> list[ActionDefinition[...]]:
        return [self.overlay.marked(definition, None) for definition, like in self.overlay.added if like == name]


class Overlay:
    """A change to ``protocol``'s ``base`` variant: replaced and added actions, added properties."""

    def __init__(self, protocol: Protocol, base: str, *, name: str = "overlay", description: str = "") -> None:
        self.base_protocol = protocol
        self.base = protocol.variant(base)  # a UsageError naming the variants if there is none
        if name in (variant.name for variant in protocol.variants):
            raise DefinitionError(f"overlay {name!r}: protocol {protocol.name} already has a variant of that name")
        self.name = name
        self.description = description or f"{base} with the overlay's changes"
        self.replaced: dict[str, ActionDefinition[...]] = {}
        self.added: list[tuple[ActionDefinition[...], str]] = []
        self.properties: list[PropertyFunction] = []

    def replace(self, definition: ActionDefinition[...]) -> ActionDefinition[...]:
        """Decorator (over ``@action``): bind ``definition`` in place of the base action of its name."""
        if not isinstance(definition, ActionDefinition):
            raise DefinitionError(f"overlay {self.name}: replace takes an @action definition, not {definition!r}")
        self.replaced[definition.name] = definition
        return definition

    def add(self, *, like: str) -> Callable[[ActionDefinition[...]], ActionDefinition[...]]:
        """Decorator (over ``@action``): a new action, bound as the base action ``like`` is."""

        def register(definition: ActionDefinition[...]) -> ActionDefinition[...]:
            if not isinstance(definition, ActionDefinition):
                raise DefinitionError(f"overlay {self.name}: add takes an @action definition, not {definition!r}")
            self.added.append((definition, like))
            return definition

        return register

    def property(self, function: PropertyFunction) -> PropertyFunction:
        """Decorator: ``function(machine, state)`` declares properties on the overlaid machine."""
        self.properties.append(function)
        return function

    def marked(self, definition: ActionDefinition[...], base: ActionDefinition[...] | None) -> ActionDefinition[...]:
        """``definition`` as the overlay binds it: what it leaves empty (mirrors, description, actor)
        taken from the base action it replaces."""
        if base is None:
            return definition
        return dataclasses.replace(
            definition,
            mirrors=definition.mirrors or base.mirrors,
            description=definition.description or base.description,
            actor=definition.actor or base.actor,
        )

    def build(self, parameters: Mapping[str, int]) -> Machine:
        """The base variant's machine at ``parameters``, with the overlay's actions and properties."""
        binding = _Binding(self)
        token = REBINDING.set(binding)
        try:
            machine = self.base_protocol.build(self.base.name, parameters)
        finally:
            REBINDING.reset(token)
        actions = ", ".join(dict.fromkeys(binding.bound)) or "none"
        for name in self.replaced.keys() - binding.replaced:
            raise DefinitionError(
                f"overlay {self.name} replaces {name!r}, which {self.base_protocol.name} {self.base.name} does not "
                f"bind at these parameters; its actions: {actions}"
            )
        for definition, like in self.added:
            if like not in binding.bound:
                raise DefinitionError(
                    f"overlay {self.name} adds {definition.name!r} like {like!r}, which "
                    f"{self.base_protocol.name} {self.base.name} does not bind; its actions: {actions}"
                )
        if isinstance(machine, Machine):
            machine.name = f"{self.base_protocol.name}/{self.name}"
            own = {name: definition.mirrors for name, definition in self.replaced.items()}
            own.update((definition.name, definition.mirrors) for definition, _ in self.added)
            machine.mirror(  # after the base's own ``mirror``: every counterexample says which steps are the overlay's
                {
                    action.name: f"overlay {self.name}: {own[action.name] or action.mirrors}".rstrip(": ")
                    for action in machine.actions
                    if action.name in own
                }
            )
            for function in self.properties:
                function(machine, binding.state)
        return machine

    def protocol(self) -> Protocol:
        """The base protocol with the overlay as one more variant (its default): a model file's ``PROTOCOL``."""
        base_build = self.base_protocol.build

        def build(variant: str, parameters: Mapping[str, int]) -> Machine:
            return self.build(parameters) if variant == self.name else base_build(variant, parameters)

        variant = VariantSpec(self.name, self.description, f"{self.base.release} + overlay {self.name}")
        return dataclasses.replace(
            self.base_protocol, variants=(*self.base_protocol.variants, variant), build=build, default_variant=self.name
        )


__all__ = ["Overlay"]
