"""Protocols, variants and instances: how a model module presents itself to the tools.

A ``Protocol`` names its variants (``pre-fix``, ``post-fix`` and any mutants, each with the vLLM
release or change it stands for), its integer parameters with defaults, and its named
instances: parameter values plus the verdict expected of each variant. ``Protocol.instance``
binds a variant and an instance (with overrides) into an ``Instance``, which builds the
finished ``Machine``. Unknown names and bad values raise ``UsageError`` with the choices.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from lockstep.spec.machine import Machine

# Every protocol's two released variants; a model's mutants name themselves.
PRE_FIX, POST_FIX = "pre-fix", "post-fix"


class UsageError(ValueError):
    """A user asked for something that does not exist or is out of range (exit code 2)."""


@dataclass(frozen=True)
class ParameterSpec:
    name: str
    default: int
    description: str
    minimum: int = 0
    maximum: int | None = None
    derived: Callable[[Mapping[str, int]], int] | None = None  # a default computed from the others


@dataclass(frozen=True)
class VariantSpec:
    name: str
    description: str
    release: str  # the vLLM release or change the variant stands for
    # a vLLM release after post-fix's (not a mutant): its violations of a finding instance are findings too
    later_release: bool = False


@dataclass(frozen=True)
class InstanceSpec:
    name: str
    description: str
    parameters: Mapping[str, int] = field(default_factory=dict)
    expected: Mapping[str, str] = field(default_factory=dict)  # variant -> overall verdict
    # A finding (a violation of a released, post-fix variant that vLLM's source confirms) names the
    # vLLM functions involved; the README's Findings table is generated from these.
    finding: str = ""
    # the properties the finding is about: the table lists the released variants that violate one of them
    # (none named: every released variant pinned violated, with its shortest counterexample)
    finding_properties: tuple[str, ...] = ()


@dataclass(frozen=True)
class Protocol:
    name: str
    title: str
    change: str  # e.g. "vLLM PR #39366"
    variants: tuple[VariantSpec, ...]
    parameters: tuple[ParameterSpec, ...]
    instances: tuple[InstanceSpec, ...]
    build: Callable[[str, Mapping[str, int]], Machine]
    rank_parameter: str | None = None
    default_instance: str = "seed"
    default_variant: str = POST_FIX

    def variant(self, name: str) -> VariantSpec:
        for variant in self.variants:
            if variant.name == name:
                return variant
        choices = ", ".join(variant.name for variant in self.variants)
        raise UsageError(f"protocol {self.name} has no variant {name!r}; variants: {choices}")

    def instance_spec(self, name: str) -> InstanceSpec:
        for instance in self.instances:
            if instance.name == name:
                return instance
        choices = ", ".join(instance.name for instance in self.instances)
        raise UsageError(f"protocol {self.name} has no instance {name!r}; instances: {choices}")

    def parameter(self, name: str) -> ParameterSpec:
        for parameter in self.parameters:
            if parameter.name == name:
                return parameter
        choices = ", ".join(parameter.name for parameter in self.parameters)
        raise UsageError(f"protocol {self.name} has no parameter {name!r}; parameters: {choices}")

    def instance(
        self,
        variant: str | None = None,
        instance: str | None = None,
        overrides: Mapping[str, int] | None = None,
        ranks: int | None = None,
    ) -> Instance:
        variant_spec = self.variant(variant or self.default_variant)
        instance_spec = self.instance_spec(instance or self.default_instance)
        values = {parameter.name: parameter.default for parameter in self.parameters}
        values.update(instance_spec.parameters)
        changed = dict(overrides or {})
        if ranks is not None:
            if self.rank_parameter is None:
                raise UsageError(f"protocol {self.name} has no rank parameter; --ranks does not apply")
            changed[self.rank_parameter] = ranks
        for name, value in changed.items():
            spec = self.parameter(name)
            if value < spec.minimum or (spec.maximum is not None and value > spec.maximum):
                upper = "" if spec.maximum is None else f" and at most {spec.maximum}"
                raise UsageError(f"parameter {name} of {self.name} must be at least {spec.minimum}{upper}, got {value}")
            values[name] = value
        for spec in self.parameters:  # derived defaults follow the values they derive from
            if spec.derived is not None and spec.name not in changed and spec.name not in instance_spec.parameters:
                values[spec.name] = spec.derived(values)
        expected = None if changed else instance_spec.expected.get(variant_spec.name)
        return Instance(self, variant_spec.name, instance_spec.name, values, expected)


@dataclass(frozen=True)
class Instance:
    """A variant bound to parameter values; ``expected`` is None when parameters were overridden."""

    protocol: Protocol
    variant: str
    name: str
    parameters: Mapping[str, int]
    expected: str | None

    def machine(self) -> Machine:
        machine = self.protocol.build(self.variant, self.parameters)
        return machine.finish()

    @property
    def label(self) -> str:
        return f"{self.protocol.name} {self.variant} {self.name}"


def parse_assignment(text: str) -> tuple[str, int]:
    """``NAME=VALUE`` from the command line, VALUE an integer."""
    name, separator, value = text.partition("=")
    if not separator or not name:
        raise UsageError(f"--set expects NAME=VALUE, got {text!r}")
    try:
        return name.strip(), int(value)
    except ValueError:
        raise UsageError(f"--set {name}: {value!r} is not an integer") from None
