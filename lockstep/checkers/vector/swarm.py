"""Swarm search: many independent random walks over packed states, run as one batch (``--engine swarm``).

For instances no search can exhaust. A batch of walks advances together through the kernels
``bfs-vec`` runs: the array kernels of ``kernels`` (numpy), or their C loops (``native``: compiled in
the background once the swarm has taken ``COMPILE_AFTER_STEPS``, or read from the cache), which give the same
successors in the same order, so a seed takes the same walks with either. Each step expands every walk's
state, checks the steps that leave a sort (``in_bounds``), the walks with no enabled action
(deadlock conditions) and evaluation failures (``well_defined``), picks one enabled successor per
walk at random, and checks every safety property on the states reached. A walk ends at its own
depth bound (drawn per walk between half ``depth`` and ``depth``) or at a deadlock; a new walk
takes its place until ``walks`` have run. Walks are diversified: half of them prefer a random
subset of the actions (a preferred action's successors are picked while one is enabled; the
others only where none is: never a deadlock the model does not have), the rest pick uniformly.

The search stops at the first violation of a checked ``always`` property. The violating walk's
moves (action x arguments, from ``Kernels.tuples``) are replayed through ``evaluate`` and
shortened by delta debugging (``shortening``), each candidate re-run through ``evaluate``: the
counterexample is a real run of the model, never a kernel's word. A ``sometimes`` property a walk
witnesses holds (its witness shortened alike). Nothing else is ever "holds": a property no walk
violated is inconclusive, "no violation found in N walks of depth D"; leads-to needs the state
graph and is inconclusive here.

Distinct states seen are estimated with a HyperLogLog sketch of the states' 64-bit fingerprints
(``DistinctEstimate``: 2**14 registers, a relative standard error of about 0.8%). ``seed`` fixes
every random choice: a run with the same options and seed takes the same walks.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from lockstep.checkers.definedness import undefined_at
from lockstep.checkers.explicit.search import Progress, transition_step
from lockstep.checkers.limits import Limits, LimitWatch
from lockstep.checkers.result import CheckResult, Path, PropertyResult, Statistics, Verdict, bounds_detail
from lockstep.checkers.vector.backend import NumpyBackend
from lockstep.checkers.vector.kernels import Kernels, compile_kernels
from lockstep.checkers.vector.native import THRESHOLD, native_kernels
from lockstep.checkers.vector.shortening import Goal, Move, Replayer, shorten
from lockstep.checkers.vector.values import Unsupported
from lockstep.spec.layout import Layout, LayoutError
from lockstep.spec.machine import IN_BOUNDS, WELL_DEFINED, Machine, PropertyKind
from lockstep.spec.semantics import InterpretedSystem, Transition

DEFAULT_WALKS = 20_000
DEFAULT_DEPTH = 200
WIDTH = 8192  # walks advanced at once: enough to amortise the kernels' calls (see docs/engines.md)
COMPILE_AFTER_STEPS = 1 << 21  # steps after which the C loops are compiled where they are not cached
SHORTENING_SECONDS = 30.0  # delta debugging stops with the shortest run found by then


class DistinctEstimate:
    """A HyperLogLog sketch of 64-bit fingerprints: ``add`` them, ``estimate`` how many distinct.

    The top ``PRECISION`` bits of a fingerprint pick a register, which keeps the most leading
    zeros (plus one) seen in the remaining bits; the estimate is Flajolet et al.'s harmonic mean,
    with linear counting while registers are still empty (few states)."""

    PRECISION = 14

    def __init__(self) -> None:
        self.registers = np.zeros(1 << self.PRECISION, dtype=np.uint8)

    def add(self, fingerprints: np.ndarray) -> None:
        values = fingerprints.view(np.uint64)
        rest_bits = 64 - self.PRECISION
        index = (values >> np.uint64(rest_bits)).astype(np.int64)
        rest = values & np.uint64((1 << rest_bits) - 1)
        # the rank: leading zeros of the rest (rest_bits wide) plus one; frexp's exponent is the bit
        # length, exact here (a rest has at most 50 bits, within a double's 53)
        _, length = np.frexp(rest.astype(np.float64))
        rank = (rest_bits + 1 - length).astype(np.uint8)
        np.maximum.at(self.registers, index, rank)

    def estimate(self) -> int:
        count = len(self.registers)
        alpha = 0.7213 / (1 + 1.079 / count)
        raw = alpha * count * count / float(np.sum(np.ldexp(1.0, -self.registers.astype(np.int64))))
        empty = int(np.count_nonzero(self.registers == 0))
        if raw <= 2.5 * count and empty:
            return round(count * math.log(count / empty))
        return round(raw)


@dataclass
class _Found:
    """A walk that violated (or witnessed) a property: its moves as tuple ids, and how."""

    chain: list[int]
    extra: int | None = None  # in_bounds: the tuple id of the step that leaves a sort
    deadlock: bool = False
    steps_before: int = 0  # steps the swarm had taken when it was found


class Swarm:
    """One swarm run; ``run()`` returns the ``CheckResult`` (engine ``swarm``)."""

    def __init__(
        self,
        machine: Machine,
        *,
        walks: int = DEFAULT_WALKS,
        depth: int = DEFAULT_DEPTH,
        seed: int = 0,
        watched: frozenset[int] | None = None,
        limits: Limits | None = None,
        progress: Progress | None = None,
        width: int = WIDTH,
        kernels: str = "auto",
    ) -> None:
        started = time.monotonic()
        self.machine = machine.finish()
        try:
            self.layout = Layout(self.machine)
        except LayoutError as error:
            raise Unsupported(str(error)) from None
        self.backend = NumpyBackend()
        self.kernels: Kernels = compile_kernels(self.machine, self.layout, self.backend.namespace())
        # the C loops of ``bfs-vec`` where a compiler is there (``auto``: read from the cache, or compiled in
        # the background after ``COMPILE_AFTER_STEPS``; ``c``: compiled first); they pick the same walks
        self.native = native_kernels(self.kernels, kernels, None if limits is None else limits.max_memory_bytes)
        self.walks, self.depth, self.seed = walks, depth, seed
        self.width = max(1, min(width, walks))
        self.watched = watched
        self.limits = limits or Limits()
        self.progress = progress
        self.random = np.random.default_rng(seed)
        self.action_of = np.array([action for action, _ in self.kernels.tuples], dtype=np.int64)
        self.found: dict[int, _Found] = {}
        self.undefined: str | None = None  # well_defined: why evaluation failed where a walk stood
        self.sketch = DistinctEstimate()
        self.stats = Statistics(states=None, transitions=0)
        self.stats.phases["kernels"] = time.monotonic() - started

    # ----------------------------------------------------------------------------------- the walks
    def _checked(self, position: int) -> bool:
        return position not in self.found and (self.watched is None or position in self.watched)

    def _stop(self) -> bool:
        """A checked ``always`` property is violated: the swarm stops."""
        properties = self.machine.properties
        return any(
            properties[position].kind is PropertyKind.ALWAYS and (self.watched is None or position in self.watched)
            for position in self.found
        )

    def _new_walks(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Depth bounds and preferred actions (rows of a mask) of ``count`` new walks."""
        bounds = self.random.integers(max(1, self.depth // 2), self.depth + 1, size=count)
        actions = len(self.machine.actions)
        preferred = self.random.random((count, actions)) < 0.5
        uniform = self.random.random(count) < 0.5
        preferred[uniform] = True
        return bounds, preferred

    def run(self) -> CheckResult:
        started = time.monotonic()
        watch = LimitWatch(self.limits, started)
        initial = np.array(self.layout.encode(InterpretedSystem(self.machine).initial()), dtype=np.int64)
        self._check_states(initial[:, None], [[]], 0)
        width = self.width
        frontier = np.repeat(initial[:, None], width, axis=1)
        history = np.zeros((width, self.depth), dtype=np.int32)
        depths = np.zeros(width, dtype=np.int64)
        bounds, preferred = self._new_walks(width)
        begun = width
        reached = 0
        stopped: str | None = None
        self.sketch.add(self.backend.fingerprint(initial[:, None]))
        try:
            while width and not self._stop():
                ended = self._step(frontier, history, depths, preferred)
                reached = max(reached, int(depths.max(initial=0)))
                if self._stop():
                    break
                ended |= depths >= bounds
                restart = np.flatnonzero(ended)
                if len(restart):
                    renewed = restart[: max(0, self.walks - begun)]
                    begun += len(renewed)
                    frontier[:, renewed] = initial[:, None]
                    depths[renewed] = 0
                    bounds[renewed], preferred[renewed] = self._new_walks(len(renewed))
                    retired = restart[len(renewed) :]
                    if len(retired):
                        keep = np.ones(width, dtype=bool)
                        keep[retired] = False
                        frontier, history, depths = frontier[:, keep], history[keep], depths[keep]
                        bounds, preferred = bounds[keep], preferred[keep]
                        width = int(frontier.shape[1])
                stopped = watch.exceeded(0, every=64)
                if stopped is not None:
                    break
                if self.progress is not None:
                    self._progress(started, reached)
        except KeyboardInterrupt:
            stopped = "interrupted"
        stats = self.stats
        stats.seconds = time.monotonic() - started
        stats.phases["search"] = stats.seconds
        stats.depth = reached
        stats.walks = begun
        stats.distinct_estimate = self.sketch.estimate()
        return self._result(stopped, time.monotonic())

    def _progress(self, started: float, reached: int) -> None:
        assert self.progress is not None
        seconds = time.monotonic() - started
        self.progress(Statistics(self.sketch.estimate(), self.stats.transitions, reached, seconds))

    def _step(self, frontier: np.ndarray, history: np.ndarray, depths: np.ndarray, preferred: np.ndarray) -> np.ndarray:
        """Advance every walk one step (in place); return the mask of walks that ended (deadlocked)."""
        width = int(frontier.shape[1])
        # an uncached library is compiled once the swarm has run a while (a swarm that finds its violation
        # in its first steps would only share the cores with the compiler): ``native`` counts stored states
        grown = THRESHOLD if self._steps() >= COMPILE_AFTER_STEPS else 0
        expansion = None if self.native is None else self.native.expand(frontier, grown)
        if expansion is not None:  # the C loop: successors in (walk, tuple id) order, with fingerprints
            dead = ~np.asarray(expansion.enabled, dtype=bool)
            if dead.any():
                self._deadlocks(frontier, np.flatnonzero(dead), history, depths)
            rows, tuples, successors = expansion.rows, expansion.via, expansion.states
            fingerprints = expansion.fingerprints
        else:
            found = self._array_successors(frontier, history, depths)
            if found is None:
                return np.zeros(width, dtype=bool)
            dead, rows, tuples, successors = found
            fingerprints = None
        if self._stop() or not len(rows):
            return dead
        favoured = preferred[rows, self.action_of[tuples]]
        order = np.lexsort((~favoured, rows))  # by walk, its preferred successors first (stable: tuple order)
        counts = np.bincount(rows, minlength=width)
        favourites = np.bincount(rows[favoured], minlength=width)
        starts = np.cumsum(counts) - counts
        moving = np.flatnonzero(counts)
        pool = np.where(favourites > 0, favourites, counts)[moving]
        picks = np.minimum((self.random.random(len(moving)) * pool).astype(np.int64), pool - 1)
        chosen = order[starts[moving] + picks]
        states = successors[:, chosen]
        frontier[:, moving] = states
        history[moving, depths[moving]] = tuples[chosen]
        depths[moving] += 1
        self.stats.transitions = self._steps() + len(moving)
        self.sketch.add(self.backend.fingerprint(states) if fingerprints is None else fingerprints[chosen])
        chains = _Chains(history, depths, moving)
        self._check_states(states, chains, self._steps())
        return dead

    def _array_successors(
        self, frontier: np.ndarray, history: np.ndarray, depths: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """Every walk's successors by the array kernels: (dead walks, each successor's walk, tuple id,
        the successors), in tuple order; steps out of a sort, deadlocks and evaluation failures are
        recorded on the way (None: evaluation failed, the swarm stops)."""
        backend, kernels = self.backend, self.kernels
        width = int(frontier.shape[1])
        blocks, enabled, errors = kernels.expand(frontier)
        if errors:
            failing = [
                entry for entry, flagged in zip(errors, backend.flags([mask for _, mask, _ in errors])) if flagged
            ]
            if failing:
                _, mask, rows = failing[0]
                row = 0 if isinstance(mask, bool) else int(np.flatnonzero(mask)[0])
                walk = int(row if rows is None else rows[row])
                self._undefined_state(history[walk, : depths[walk]].tolist())
                return None
        if enabled is True:
            dead = np.zeros(width, dtype=bool)
        else:
            dead = np.ones(width, dtype=bool) if enabled is False else ~np.asarray(enabled, dtype=bool)
            if dead.any():
                self._deadlocks(frontier, np.flatnonzero(dead), history, depths)
        rows_of, tuples_of, successors = [], [], []
        leaving_masks = [leaving for _, _, _, leaving, _ in blocks if leaving is not None]
        flagged = iter(backend.flags(leaving_masks))
        for tuple_id, rows, block, leaving, count in blocks:
            if leaving is not None and next(flagged):
                first = int(rows[int(np.flatnonzero(leaving)[0])])
                if self._checked(self._position(IN_BOUNDS)):
                    chain = history[first, : depths[first]].tolist()
                    self.found[self._position(IN_BOUNDS)] = _Found(chain, tuple_id, steps_before=self._steps())
                staying = ~leaving
                rows, block, count = rows[staying], block[:, staying], int(np.count_nonzero(staying))
            if count:
                rows_of.append(rows)
                tuples_of.append(np.full(count, tuple_id, dtype=np.int64))
                successors.append(block)
        if not rows_of:
            empty = np.zeros(0, dtype=np.int64)
            return dead, empty, empty, np.zeros((self.layout.words, 0), dtype=np.int64)
        return dead, np.concatenate(rows_of), np.concatenate(tuples_of), np.concatenate(successors, axis=1)

    def _steps(self) -> int:
        return self.stats.transitions or 0

    def _position(self, name: str) -> int:
        return next(i for i, prop in enumerate(self.machine.properties) if prop.name == name)

    def _check_states(self, states: np.ndarray, chains: Any, steps: int) -> None:
        """Record each checked property's first violation (or witness) among ``states`` (the walks'
        new states; ``chains[i]`` the tuple ids that reached column i)."""
        values, error = (self.native or self.kernels).predicates(states)
        if error is not False and bool(np.any(error)):
            failing = 0 if isinstance(error, bool) else int(np.flatnonzero(error)[0])
            self._undefined_state(chains[failing])
            return
        for position, (prop, value) in enumerate(zip(self.machine.properties, values)):
            if value is None or not self._checked(position):
                continue
            hits = value if prop.kind is PropertyKind.SOMETIMES else np.logical_not(value)
            row: int | None
            if isinstance(hits, (bool, np.bool_)):
                row = 0 if hits else None
            else:
                found = np.flatnonzero(hits)
                row = int(found[0]) if len(found) else None
            if row is not None:
                self.found[position] = _Found(list(chains[row]), steps_before=steps)

    def _deadlocks(self, frontier: np.ndarray, dead: np.ndarray, history: np.ndarray, depths: np.ndarray) -> None:
        values, error = self.kernels.deadlocked(frontier[:, dead])
        if error is not False and bool(np.any(error)):
            row = 0 if isinstance(error, bool) else int(np.flatnonzero(error)[0])
            self._undefined_state(history[dead[row], : depths[dead[row]]].tolist())
            return
        for position, value in enumerate(values):
            if value is None or not self._checked(position):
                continue
            failing = np.flatnonzero(np.logical_not(np.broadcast_to(value, dead.shape)))
            if len(failing):
                walk = int(dead[failing[0]])
                chain = history[walk, : depths[walk]].tolist()
                self.found[position] = _Found(chain, deadlock=True, steps_before=self._steps())

    def _undefined_state(self, chain: list[int]) -> None:
        """Evaluation fails where a walk stands: ``well_defined`` is violated there."""
        position = self._position(WELL_DEFINED)
        if self._checked(position):
            self.found[position] = _Found(list(chain), steps_before=self._steps())
        else:  # not checked: the walks cannot go on past it either
            self.found.setdefault(position, _Found(list(chain), steps_before=self._steps()))

    # ------------------------------------------------------------------------------------ results
    def _result(self, stopped: str | None, started: float) -> CheckResult:
        machine, stats = self.machine, self.stats
        system = InterpretedSystem(machine)
        results: list[PropertyResult] = []
        shortening_ends = started + SHORTENING_SECONDS
        searched = f"{stats.walks:,} walks of depth at most {self.depth} (seed {self.seed})"
        for position, prop in enumerate(machine.properties):
            if self.watched is not None and position not in self.watched:
                results.append(PropertyResult(prop.name, prop.kind, Verdict.INCONCLUSIVE, None, "not checked"))
                continue
            if prop.kind is PropertyKind.LEADS_TO:
                detail = "leads-to needs the state graph: checked by --engine bfs"
                results.append(PropertyResult(prop.name, prop.kind, Verdict.INCONCLUSIVE, None, detail, prop.builtin))
                continue
            found = self.found.get(position)
            if found is None:
                what = "no witness" if prop.kind is PropertyKind.SOMETIMES else "no violation"
                detail = f"{what} found in {searched}: a swarm never proves"
                results.append(PropertyResult(prop.name, prop.kind, Verdict.INCONCLUSIVE, None, detail, prop.builtin))
                continue
            path, detail = self._counterexample(system, position, found, shortening_ends)
            verdict = Verdict.HOLDS if prop.kind is PropertyKind.SOMETIMES else Verdict.VIOLATED
            results.append(PropertyResult(prop.name, prop.kind, verdict, path, detail, prop.builtin))
        stats.phases["counterexample"] = time.monotonic() - started
        return CheckResult(machine, "swarm", results, stats, stopped, [], [])

    def _counterexample(self, system: InterpretedSystem, position: int, found: _Found, ends: float) -> tuple[Path, str]:
        """The walk's path, replayed through ``evaluate`` and shortened; the detail that goes with it."""
        tuples = self.kernels.tuples
        moves: list[Move] = [tuples[tuple_id] for tuple_id in found.chain]
        if found.extra is not None:
            moves.append(tuples[found.extra])
        replayer = Replayer(system, Goal(position, found.deadlock))
        shortest = shorten(replayer, moves, lambda: time.monotonic() < ends)
        taken = replayer.run(shortest)
        assert taken is not None  # ``shorten`` returns a run that meets the goal
        path = Path(system.initial(), tuple(transition_step(self.machine, transition) for transition in taken))
        prop = self.machine.properties[position]
        how = (
            f"a walk's {len(moves)} steps shortened to {path.length} by delta debugging ({replayer.replays} replays "
            f"through evaluate), found after {found.steps_before:,} swarm steps"
        )
        if found.deadlock:
            return path, f"no action is enabled; {how}"
        if prop.name == IN_BOUNDS:
            leaving: Transition = taken[-1]
            assert leaving.out_of_bounds is not None
            return path, f"{bounds_detail(self.machine, leaving.out_of_bounds, path.final_state)}; {how}"
        if prop.name == WELL_DEFINED:
            return path, f"{undefined_at(system, path.final_state)}; {how}"
        return path, how


class _Chains:
    """The tuple ids that reached each moved walk's new state, read on demand (``_check_states``)."""

    def __init__(self, history: np.ndarray, depths: np.ndarray, walks: np.ndarray) -> None:
        self.history, self.depths, self.walks = history, depths, walks

    def __getitem__(self, row: int) -> list[int]:
        walk = int(self.walks[row])
        return [int(tuple_id) for tuple_id in self.history[walk, : self.depths[walk]]]


__all__ = ["DEFAULT_DEPTH", "DEFAULT_WALKS", "DistinctEstimate", "Swarm"]
