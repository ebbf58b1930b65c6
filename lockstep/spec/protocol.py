"""Protocols, variants and instances: how a model module presents itself to the tools.

A ``Protocol`` names its variants (``pre-fix``, ``post-fix`` and any mutants, each with the vLLM
release or change it stands for), its integer parameters with defaults, and its named
instances: parameter values plus the verdict expected of each variant. ``Protocol.instance``
binds a variant and an instance (with overrides) into an ``Instance``, which builds the
finished ``Machine``. Unknown names and bad values raise ``UsageError`` with the choices.

Each of these checks itself when it is constructed, so a model written wrongly fails where it is
defined (a ``DefinitionError`` naming the protocol and the part, which a model file's import reports
with its file and line), never later in a search: names are non-empty strings (a trace header's
``protocol`` field must be one); a parameter's bounds and default are integers, with minimum <=
default <= maximum; variant, parameter and instance names are unique; an instance sets only declared
parameters, each to a value ``--set`` would accept, and pins only verdicts (``VERDICTS``) of variants
the protocol has; the default variant, default instance and rank parameter exist. ``build`` must
return a ``Machine`` (``Protocol.machine`` says so, naming the ``build`` function's file and line).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from lockstep.spec.machine import Machine
from lockstep.spec.terms import DefinitionError

# Every protocol's two released variants; a model's mutants name themselves.
PRE_FIX, POST_FIX = "pre-fix", "post-fix"
# The verdicts an instance may pin for a variant: the values of lockstep.checkers.result.Verdict.
VERDICTS = ("holds", "holds-within-bound", "violated", "inconclusive")


class UsageError(ValueError):
    """A user asked for something that does not exist or is out of range (exit code 2)."""


class BuildError(DefinitionError):
    """A protocol's ``build`` returned no ``Machine``; ``file`` and ``line`` are where ``build`` is defined."""

    def __init__(self, message: str, file: str | None, line: int | None) -> None:
        super().__init__(message)
        self.file, self.line = file, line


@dataclass(frozen=True)
class ParameterSpec:
    name: str
    default: int
    description: str
    minimum: int = 0
    maximum: int | None = None
    derived: Callable[[Mapping[str, int]], int] | None = None  # a default computed from the others

    def __post_init__(self) -> None:
        _require_name(self.name, "a parameter")
        what = f"parameter {self.name}"
        for label, value in (("default", self.default), ("minimum", self.minimum), ("maximum", self.maximum)):
            if not is_integer(value) and not (label == "maximum" and value is None):
                raise DefinitionError(f"{what}: the {label} must be an integer, not {_described(value)}")
        if self.maximum is not None and self.minimum > self.maximum:
            raise DefinitionError(f"{what}: the minimum {self.minimum} is larger than the maximum {self.maximum}")
        problem = self.range_problem(self.default)
        if problem is not None:
            raise DefinitionError(f"{what}: the default {problem}")

    def range_problem(self, value: int) -> str | None:
        """Why ``value`` is outside this parameter's range ("must be at least 2 and at most 4, got 9"), or None."""
        if value < self.minimum or (self.maximum is not None and value > self.maximum):
            upper = "" if self.maximum is None else f" and at most {self.maximum}"
            return f"must be at least {self.minimum}{upper}, got {value}"
        return None


@dataclass(frozen=True)
class VariantSpec:
    name: str
    description: str
    release: str  # the vLLM release or change the variant stands for
    # a vLLM release after post-fix's (not a mutant): its violations of a finding instance are findings too
    later_release: bool = False

    def __post_init__(self) -> None:
        _require_name(self.name, "a variant")


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
    # what vLLM's issues and PRs say of the finding: "known: issue #N, fixed by PR #M (0.24.0)", "related: ...", or
    # "new" (searched, not found); the findings table shows it
    upstream: str = ""

    def __post_init__(self) -> None:
        _require_name(self.name, "an instance")
        what = f"instance {self.name}"
        if not isinstance(self.parameters, Mapping):
            raise DefinitionError(
                f"{what}: parameters must be a mapping of names to integers, not {_described(self.parameters)}"
            )
        for name, value in self.parameters.items():
            if not isinstance(name, str) or not is_integer(value):
                raise DefinitionError(f"{what}: parameter {name!r} must be set to an integer, not {_described(value)}")
        if not isinstance(self.expected, Mapping):
            raise DefinitionError(
                f"{what}: expected must be a mapping of variants to verdicts, not {_described(self.expected)}"
            )
        for variant, verdict in self.expected.items():
            if verdict not in VERDICTS:
                raise DefinitionError(
                    f"{what}: the verdict pinned for variant {variant!r} must be one of {', '.join(VERDICTS)}; "
                    f"got {verdict!r}"
                )


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
    # (vLLM release, variant) pairs the model's author diffed release by release; where a model has
    # them they decide ``release_variant``, else the variants' ``release`` texts do
    release_table: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        _require_name(self.name, "a protocol")  # as a trace header's protocol field must be
        what = f"protocol {self.name}"
        for label, items, kind in (
            ("variants", self.variants, VariantSpec),
            ("parameters", self.parameters, ParameterSpec),
            ("instances", self.instances, InstanceSpec),
        ):
            if not isinstance(items, tuple) or not all(isinstance(item, kind) for item in items):
                raise DefinitionError(f"{what}: {label} must be a tuple of {kind.__name__}, not {_described(items)}")
            _require_unique(what, label, (item.name for item in items))
        if not self.variants:
            raise DefinitionError(f"{what}: declares no variants")
        if not callable(self.build):
            raise DefinitionError(f"{what}: build must be a function (variant, parameters) -> Machine")
        variants = [variant.name for variant in self.variants]
        for release, variant_name in self.release_table:
            _version(release)
            if variant_name not in variants:
                raise DefinitionError(f"{what}: release_table maps {release} to {variant_name!r}, not a variant")
        for instance in self.instances:
            self._check_instance(instance, variants)
        for label, name, names in (
            ("default_variant", self.default_variant, variants),
            ("default_instance", self.default_instance, [instance.name for instance in self.instances]),
            ("rank_parameter", self.rank_parameter, [parameter.name for parameter in self.parameters]),
        ):
            if not (name in names or (label == "rank_parameter" and name is None)):
                raise DefinitionError(
                    f"{what}: {label} {name!r} is none of its {label.split('_')[1]}s: {_listed(names)}"
                )

    def _check_instance(self, instance: InstanceSpec, variants: list[str]) -> None:
        """A ``DefinitionError`` for an instance that sets a parameter wrongly or pins an unknown variant."""
        what = f"protocol {self.name}, instance {instance.name}"
        declared = {parameter.name: parameter for parameter in self.parameters}
        for name, value in instance.parameters.items():
            parameter = declared.get(name)
            if parameter is None:
                raise DefinitionError(f"{what}: no parameter {name!r}; parameters: {_listed(declared)}")
            problem = parameter.range_problem(value)
            if problem is not None:
                raise DefinitionError(f"{what}: parameter {name} {problem}")
        for variant in instance.expected:
            if variant not in variants:
                raise DefinitionError(
                    f"{what}: pins a verdict for no variant {variant!r}; variants: {_listed(variants)}"
                )

    def machine(self, variant: str, parameters: Mapping[str, int]) -> Machine:
        """``build(variant, parameters)``, finished; a ``DefinitionError`` if it returns no ``Machine``."""
        machine = self.build(variant, parameters)
        if not isinstance(machine, Machine):
            code = getattr(self.build, "__code__", None)
            file, line = (None, None) if code is None else (code.co_filename, code.co_firstlineno)
            where = "" if code is None else f"{file}:{line}: "
            raise BuildError(
                f"{where}build() of protocol {self.name} (variant {variant}) returned {_described(machine)}, "
                "not a Machine",
                file,
                line,
            )
        return machine.finish()

    def variant(self, name: str) -> VariantSpec:
        for variant in self.variants:
            if variant.name == name:
                return variant
        choices = ", ".join(variant.name for variant in self.variants)
        raise UsageError(f"protocol {self.name} has no variant {name!r}; variants: {choices}")

    def releases(self) -> list[tuple[tuple[int, ...], tuple[int, ...], VariantSpec]]:
        """The vLLM releases the variants model, as (first, end, variant) with ``end`` excluded, in
        order. A variant whose ``release`` reads ``vLLM vA-vB`` models A to B; one that reads ``vLLM
        vA`` models A up to the next such variant's first release (the newest: A's minor series).
        Mutants and scratch variants name no release and are left out."""
        named = []
        for variant in self.variants:
            matched = _RELEASE_RANGE.fullmatch(variant.release.strip())
            if matched is not None:
                last = _version(matched[2]) if matched[2] else None
                named.append((_version(matched[1]), last, variant))
        named.sort(key=lambda item: item[0])
        found = []
        for first, last, variant in named:
            if last is not None:
                end = (*last[:-1], last[-1] + 1)
            else:
                later = [other for other, _, _ in named if other > first]
                end = min(later) if later else (first[0], first[1] + 1, 0)
            found.append((first, end, variant))
        return found

    def release_variant(self, version: str) -> VariantSpec | None:
        """The variant that models vLLM ``version`` (``0.32.0``, ``v0.32.0``; a local or dev suffix
        is ignored), or None when no variant models it: the model's ``release_table`` where it has one
        (a release missing from it is as the newest listed before it), else the variants' ranges
        (``releases``; where they overlap the release-by-release variant wins, then the narrowest)."""
        wanted = _version(version)
        if self.release_table:
            table = sorted((_version(release), name) for release, name in self.release_table)
            newest = table[-1][0]
            below = [name for release, name in table if release <= wanted]
            if below and wanted < (newest[0], newest[1] + 1, 0):  # a patch release is as its minor's last
                return self.variant(below[-1])
            return None
        holding = [(first, end, variant) for first, end, variant in self.releases() if first <= wanted < end]
        if not holding:
            return None
        return min(holding, key=lambda item: (not item[2].later_release, item[1], tuple(-part for part in item[0])))[2]

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
            given = changed.get(self.rank_parameter, ranks)
            if given != ranks:
                raise UsageError(f"--ranks {ranks} and --set {self.rank_parameter}={given} disagree; give one")
            changed[self.rank_parameter] = ranks
        for name, value in changed.items():
            problem = self.parameter(name).range_problem(value)
            if problem is not None:
                raise UsageError(f"parameter {name} of {self.name} {problem}")
            values[name] = value
        for spec in self.parameters:  # derived defaults follow the values they derive from
            if spec.derived is not None and spec.name not in changed and spec.name not in instance_spec.parameters:
                values[spec.name] = spec.derived(values)
        expected = None if changed else instance_spec.expected.get(variant_spec.name)
        return Instance(self, variant_spec.name, instance_spec.name, values, expected)


_RELEASE_RANGE = re.compile(r"vLLM v(\d+\.\d+\.\d+)(?:-v(\d+\.\d+\.\d+))?")


def _version(text: str) -> tuple[int, ...]:
    """``0.32.0`` (``v0.32.0``, ``0.32.0+cpu``, ``0.32.0.dev3``) as (0, 32, 0); a ``UsageError`` otherwise."""
    matched = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if matched is None:
        raise UsageError(f"{text!r} is not a vLLM release (say 0.32.0)")
    return tuple(int(part or 0) for part in matched.groups())


@dataclass(frozen=True)
class Instance:
    """A variant bound to parameter values; ``expected`` is None when parameters were overridden."""

    protocol: Protocol
    variant: str
    name: str
    parameters: Mapping[str, int]
    expected: str | None

    def machine(self) -> Machine:
        return self.protocol.machine(self.variant, self.parameters)

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


def parse_assignments(texts: Iterable[str]) -> dict[str, int]:
    """Every ``--set NAME=VALUE``; a name set twice is refused (which one was meant is unclear)."""
    found: dict[str, int] = {}
    for text in texts:
        name, value = parse_assignment(text)
        if name in found:
            raise UsageError(f"--set {name} is given twice ({found[name]} and {value}); give it once")
        found[name] = value
    return found


def is_integer(value: object) -> bool:
    """An ``int`` that is not a ``bool``: what a parameter's value and bounds must be."""
    return isinstance(value, int) and not isinstance(value, bool)


def _described(value: object) -> str:
    """``int 42``, ``str '1'``, ``None``: a wrong value in a message, with its type."""
    if value is None:
        return "None"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _listed(names: Iterable[str]) -> str:
    return ", ".join(names) or "(none)"


def _require_name(name: object, what: str) -> None:
    """A ``DefinitionError`` unless ``name`` is a non-empty string (a trace header's rule for a protocol)."""
    if not isinstance(name, str) or not name:
        raise DefinitionError(f"{what}'s name must be a non-empty string, not {_described(name)}")


def _require_unique(what: str, label: str, names: Iterable[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise DefinitionError(f"{what}: two {label} are named {name!r}")
        seen.add(name)
