"""The runtime's protocols: what each can run, and where its rank code lives. Imports no torch.

Each protocol is a package under ``lockstep.impl`` whose ``__init__`` (which imports no torch)
defines ``RUNTIME = RuntimeProtocol(...)``; ``RUNTIME_PROTOCOLS`` finds them all. The package's
``rank`` module provides

- optionally ``join(config: RunConfig) -> Groups`` (default: ``distributed.join``, the default
  group with the run's timeout);
- ``run_rank(config: RunConfig, config_path: str, groups: Groups) -> int``: the rank's whole run
  (create the named groups in the same order on every rank, open the process's recorder, status
  board and choice source, run, close), its exit status 0 when the protocol finished;

and the variants, scenarios (the first is the default), rank range and protocol settings
(``--set NAME=VALUE``, kept in ``RunConfig.extra``) that ``lockstep run`` accepts for it. Its
``parameters`` module provides ``model_parameters(config)``, the trace header's parameters that
``lockstep.impl.process.open_process`` records.
``validate`` checks a combination the flags alone cannot (it returns a message, or None).
``actors_that_choose`` names the actors that make a run's choices (``choice_actors``, else the
ranks and ``helper_actors``): ``lockstep run --choices`` refuses a choice of any other actor.
``reproduction`` names a torch-free module whose ``plan(header, events)`` turns a model
counterexample into a ``Reproduction`` for ``lockstep reproduce``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lockstep.impl.choices import Choice
    from lockstep.impl.runtime import RunConfig


@dataclass(frozen=True)
class Setting:
    """A protocol setting: an integer in [low, high] with a default and a line of help."""

    default: int
    low: int
    high: int
    help: str


@dataclass(frozen=True)
class Reproduction:
    """How to run a model counterexample in the runtime: the scenario (which holds the run to the
    counterexample's order), rank count, scripted choices, ``RunConfig`` fields (``settings``)
    and ``RunConfig.extra`` entries."""

    scenario: str
    ranks: int
    choices: list[Choice]
    settings: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RuntimeProtocol:
    """One protocol the runtime runs (see the module doc)."""

    name: str
    package: str
    variants: tuple[str, ...]
    scenarios: tuple[str, ...]
    ranks: tuple[int, int]  # fewest, most
    default_ranks: int
    settings: Mapping[str, Setting] = field(default_factory=dict)
    validate: Callable[[RunConfig], str | None] | None = None
    summary: str = ""
    reproduction: str = ""  # a module whose plan(header, events) -> Reproduction; "" if it has none
    fuzz_scenario: str = ""  # the scenario runtime-against-model fuzzing runs (default: the first)
    helper_actors: tuple[str, ...] = ()  # actors besides the ranks that make choices (dp-pause: client)
    # every actor that makes choices where not the ranks and helper_actors ("rank:*": every rank), e.g.
    # pp-broadcast's engine; `lockstep run --choices` refuses a choice of any other actor
    choice_actors: tuple[str, ...] = ()

    def actors_that_choose(self, ranks: int) -> tuple[str, ...]:
        """The actors whose choices a run of ``ranks`` ranks asks (``choice_actors``, else the ranks and
        ``helper_actors``)."""
        declared = self.choice_actors or ("rank:*", *self.helper_actors)
        every_rank = tuple(f"rank:{rank}" for rank in range(ranks))
        return tuple(actor for entry in declared for actor in (every_rank if entry == "rank:*" else (entry,)))

    def plan_reproduction(self, header: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> Reproduction:
        """The reproduction of a model counterexample (``ValueError`` when this protocol has none)."""
        if not self.reproduction:
            raise ValueError(f"the {self.name} runtime cannot reproduce counterexamples yet")
        planned: Reproduction = importlib.import_module(self.reproduction).plan(header, events)
        return planned

    def rank_module(self) -> ModuleType:
        """The package's ``rank`` module (imports torch)."""
        return importlib.import_module(f"{self.package}.rank")


def _discover() -> dict[str, RuntimeProtocol]:
    """Every package under ``lockstep.impl`` whose ``__init__`` (torch-free) defines ``RUNTIME``."""
    import lockstep.impl

    found: dict[str, RuntimeProtocol] = {}
    for module in sorted(pkgutil.iter_modules(lockstep.impl.__path__), key=lambda module: module.name):
        if not module.ispkg:
            continue
        protocol = getattr(importlib.import_module(f"lockstep.impl.{module.name}"), "RUNTIME", None)
        if isinstance(protocol, RuntimeProtocol):
            found[protocol.name] = protocol
    return found


class _Registry(Mapping[str, RuntimeProtocol]):
    """``RUNTIME_PROTOCOLS``: discovered on first use, not at import. A protocol package imports this
    module for ``RuntimeProtocol``; discovering then, with that package half imported (no ``RUNTIME``
    yet), left its protocol out whenever it was the first of the runtime a process imported."""

    def __init__(self) -> None:
        self._found: dict[str, RuntimeProtocol] | None = None

    def _protocols(self) -> dict[str, RuntimeProtocol]:
        if self._found is None:
            self._found = _discover()
        return self._found

    def __getitem__(self, name: str) -> RuntimeProtocol:
        return self._protocols()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._protocols())

    def __len__(self) -> int:
        return len(self._protocols())


RUNTIME_PROTOCOLS: Mapping[str, RuntimeProtocol] = _Registry()


def runtime_protocol(name: str) -> RuntimeProtocol:
    """The protocol called ``name`` (KeyError names the ones there are)."""
    try:
        return RUNTIME_PROTOCOLS[name]
    except KeyError:
        raise KeyError(f"the runtime has no protocol {name!r}; it runs: {', '.join(RUNTIME_PROTOCOLS)}") from None
