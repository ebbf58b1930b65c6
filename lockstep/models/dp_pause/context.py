"""What the dp-pause modules share while one machine is built.

``model.build`` declares the variables and the communicators; ``engine.py`` adds the engine cores'
actions, ``coordinator.py`` the coordinator's, ``client.py`` the front-end client's and
``properties.py`` the properties. They share the variant names and enums below and meet in a
``Context``: the machine (whose variables any module reads by name), the parameters, the rank
sort, the message record and the engine predicates the client and the properties need.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lockstep.spec.expressions import Variable
from lockstep.spec.machine import Machine
from lockstep.spec.sorts import IndexSort, MapSort, RecordSort, enum
from lockstep.spec.terms import Term, map_of

PRE_FIX, POST_FIX = "pre-fix", "post-fix"
# Rejected alternatives of PR #39366's discussion, as mutants (they show why the fix has its shape):
IGNORE_WHILE_PAUSED = "ignore-wave-while-paused"  # #36608/#38009: v0.20.0 + drop START_DP_WAVE while paused
NO_LOCAL_WAKEUP = "no-local-wakeup"  # an intermediate #39366: add_request's stale branch without running = True

MessageKind = enum("MessageKind", ["ADD", "START_WAVE", "PAUSE", "RPC", "RESUME", "PAUSE_ABORT", "PAUSE_WAIT", "BARRIER", "ABORT"])
ReportKind = enum("ReportKind", ["WAVE_COMPLETE", "START_WAVE"])
Mode = enum("Mode", ["TOP", "FORWARD_REAL", "FORWARD_DUMMY", "SYNC", "RPC", "RESUME_BARRIER", "BARRIER"])
PauseState = enum("PauseState", ["UNPAUSED", "PAUSED_NEW", "PAUSED_ALL"])


def variable_reader(machine: Machine) -> Callable[[str], Term]:
    """A function that returns the Term reading a state variable of ``machine`` by name."""
    return lambda name: Term(Variable(name, machine.variables[name].sort))


@dataclass(frozen=True)
class Context:
    machine: Machine
    parameters: Mapping[str, int]
    variant: str
    fixed: bool  # the two-phase pause of v0.21.0 (post-fix and its mutants)
    rank: IndexSort
    message_sort: RecordSort
    message: Callable[..., Term]  # message(kind, wave=0, exclude=None) -> a Message record
    has_work: Callable[[Term], Term]  # EngineCoreProc.has_work() of a rank

    @property
    def size(self) -> int:
        return self.rank.count

    def has(self, name: str) -> bool:
        return name in self.machine.variables

    def read(self, name: str) -> Term:
        """The Term that reads state variable ``name``."""
        return variable_reader(self.machine)(name)


def machine_map(sort: IndexSort, body: Callable[[Term], object], like: Term) -> Term:
    """A per-rank map built from ``body(rank)``, with the value sort of ``like``."""
    assert isinstance(like.sort, MapSort)
    return map_of(sort, body, like.sort.value)  # type: ignore[arg-type]
