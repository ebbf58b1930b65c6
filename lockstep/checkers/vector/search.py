"""Level-synchronous BFS over packed states with compiled kernels: ``bfs-vec`` and ``bfs-gpu``.

One loop serves both backends. A level's frontier is expanded in chunks: the kernels give every enabled
action x argument tuple's successors at once; successors are canonicalised (symmetry), fingerprinted,
deduplicated among themselves and against the visited set, and the new ones form the next frontier.
Per stored state the engine keeps its parent's index and the tuple id that reached it (numpy: 6 bytes
of host memory; torch: the 8-byte discovery key that holds both, left on the device), so shortest
counterexamples are rebuilt by replaying tuples through ``evaluate`` (``paths``). Properties are
evaluated as masks over each level's new states, deadlocks over the frontier rows with no enabled
action. Statistics, verdicts and warnings have the meaning they have in ``ExplicitSearch``; a
complete search gives exactly its counts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from lockstep.checkers.explicit.search import FIRST_VIOLATION, Progress, first_violation, property_verdict
from lockstep.checkers.limits import Limits, LimitWatch, MemoryForecast, process_peak_bytes
from lockstep.checkers.result import (
    CheckResult,
    PropertyResult,
    Statistics,
    Verdict,
    bounds_detail,
    never_enabled_warning,
)
from lockstep.checkers.vector.backend import Backend, TorchBackend
from lockstep.checkers.vector.fused_launch import Expansion, fused_kernels
from lockstep.checkers.vector.kernels import Kernels, compile_kernels
from lockstep.checkers.vector.native import native_kernels
from lockstep.checkers.vector.paths import PathBuilder, reproduce_action_error, reproduce_property_error
from lockstep.checkers.vector.values import Unsupported
from lockstep.checkers.vector.visited import VisitedSet, omission_probability
from lockstep.spec.layout import Layout, LayoutError
from lockstep.spec.machine import IN_BOUNDS, Machine, PropertyKind
from lockstep.spec.semantics import InterpretedSystem

ROOT = np.iinfo(np.uint32).max  # the parent index of the initial state


@dataclass
class _Found:
    state: int  # the global index of the violating (or witnessing, or deadlocked) state
    extra: int | None = None  # in_bounds: the tuple id of the step that leaves a sort
    deadlock: bool = False
    depth: int = 0  # the length of the path it takes (partitioned searches keep the shortest)


def vectorisable(machine: Machine, positions: frozenset[int] | None = None) -> str | None:
    """Why the vectorised engines cannot check ``machine`` (None when they can): a leads-to
    property among those checked, or a sort without a packed layout."""
    for position, prop in enumerate(machine.properties):
        if prop.kind is PropertyKind.LEADS_TO and (positions is None or position in positions):
            return f"property {prop.name} is a leads-to property, which needs the state graph (bfs checks it)"
    try:
        Layout(machine)
    except LayoutError as error:
        return f"{error} (bfs checks it)"
    return None


def _bytes(arrays: list[Any]) -> int:
    """The bytes the arrays hold (numpy's or torch's ``nbytes``)."""
    return sum(int(getattr(array, "nbytes", 0)) for array in arrays)


class VectorSearch:
    """One run of the vectorised BFS; ``run()`` returns the ``CheckResult``."""

    def __init__(
        self,
        machine: Machine,
        backend: Backend,
        *,
        engine: str,
        symmetry: bool = False,
        compact: bool = False,
        stop_at_first: bool = False,
        watched: frozenset[int] | None = None,
        limits: Limits | None = None,
        progress: Progress | None = None,
        chunk: int | None = None,
        kernels: str = "auto",
    ) -> None:
        began = time.monotonic()
        self.machine = machine.finish()
        try:
            self.layout = Layout(self.machine)
        except LayoutError as error:
            raise Unsupported(str(error)) from None
        self.backend = backend
        self.engine = engine
        self.kernels: Kernels = compile_kernels(self.machine, self.layout, backend.namespace(), symmetry)
        generated = time.monotonic()
        # kernels (``engines.VectorOptions``): auto, arrays (the array kernels alone), c or triton
        torch = isinstance(backend, TorchBackend)
        self.fused = fused_kernels(self.kernels, backend.device, kernels) if torch else None
        self.native = (
            None
            if torch
            else native_kernels(self.kernels, kernels, None if limits is None else limits.max_memory_bytes)
        )
        compiled = time.monotonic()
        self.visited = VisitedSet(backend, self.layout.words, exact=not compact)
        self.fingerprint = backend.fingerprint
        self.canonical, self.canonical_keys = self.kernels.canonical, None  # fused: representatives with keys
        if self.fused is not None:  # Triton is there: one kernel per fingerprint pass, and a hash table for --compact
            self.fingerprint = self.fused.fingerprint
            if self.canonical is not None and self.fused.fused.canonical:
                self.canonical, self.canonical_keys = self.fused.canonical, self.fused.canonical_keys
            if compact:
                self.visited = self.fused.visited_set(backend, self.layout.words)
        self.prefilter = self.visited.hashed  # look successors up before sorting them (a lookup is cheaper)
        self.stop_at_first = stop_at_first
        self.watched = watched  # the properties whose first violation stops it (None: all)
        self.limits = limits or Limits()
        # --max-memory: what a chunk will allocate is counted before it runs (a first guess per
        # transition: its successor's words twice, as the block and its stored copy, and its keys)
        self.forecast = MemoryForecast(self.limits.memory_cap(), 16.0 * self.layout.words + 32.0)
        self.progress = progress
        self.chunk = chunk or backend.chunk  # frontier states expanded at once
        self.via_type = np.uint16 if len(self.kernels.tuples) < (1 << 16) else np.uint32
        self.parent_type: Any = np.uint32  # 4 bytes per state (one process: fewer than 2**32 states)
        self.root = ROOT
        self.depth = 0
        self.parents: list[Any] = []  # per level, the parents' global ids (or, on a torch device, discovery keys)
        self.via: list[np.ndarray | None] = []  # per level, the tuple ids that reached the states (None: in the keys)
        self.links_on_device = isinstance(backend, TorchBackend)  # torch: a level's discovery keys stay put
        self.found: dict[int, _Found] = {}
        self.fired: set[int] = set()
        self.stored = 0
        self.stats = Statistics()
        # the phase profile: the array kernels generated (or read from the cache) and compiled, then
        # their C or Triton spelling compiled or loaded (``run`` adds the search and the counterexamples)
        self.stats.phases.update(kernels=generated - began, compiled_kernels=compiled - generated)
        self._offsets: np.ndarray | None = None
        self._pending: dict[int, tuple[int, _Found]] = {}  # this chunk's candidate findings, by property
        self._branching = 1.0  # transitions per state of the last chunk expanded (the next one's estimate)

    # ----------------------------------------------------------------------------------- the loop
    def run(self) -> CheckResult:
        started = time.monotonic()
        watch = LimitWatch(self.limits, started)
        stats = self.stats
        stats.transitions = 0
        frontier = self._initial()
        depth = 0
        stopped: str | None = None
        truncated = False
        try:
            while self._live(frontier) and stopped is None:
                stats.depth = self.depth = depth
                if self.limits.max_depth is not None and depth >= self.limits.max_depth:
                    truncated = True
                    break
                frontier, stopped = self._level(frontier, watch, started)
                depth += 1
        except KeyboardInterrupt:
            stopped = "interrupted"
        except (MemoryError, RuntimeError) as error:  # torch.OutOfMemoryError is a RuntimeError
            if not isinstance(error, MemoryError) and "out of memory" not in str(error).lower():
                raise
            stopped = "max-memory"  # the device or host is full: what was explored stands, the rest is unknown
        stats.states = self.stored
        stats.seconds = time.monotonic() - started
        stats.phases["search"] = stats.seconds
        complete = stopped is None and not truncated
        result = self._result(complete, truncated and stopped is None, stopped)
        stats.phases["counterexample"] = time.monotonic() - started - stats.seconds
        stats.peak_memory_bytes = process_peak_bytes()  # the forecast clears the kernel's peak: kept here
        return result

    def _initial_state(self) -> tuple[Any, Any]:
        """The initial state's packed words (its representative, with symmetry), as a frontier, and its
        fingerprint: through the kernels the search uses (with symmetry on a GPU, the fused canonical
        kernel gives both; the array kernels' first call there costs ~0.1 s of launches)."""
        first = self.backend.array(
            np.array(self.layout.encode(InterpretedSystem(self.machine).initial()), dtype=np.int64)[:, None]
        )
        if self.canonical_keys is not None:
            return self.canonical_keys(first)
        if self.canonical is not None:
            first = self.canonical(first)
        return first, self.fingerprint(first)

    def _initial(self) -> Any:
        """Store the initial state; return the first frontier."""
        first, key = self._initial_state()
        self._store(first, key, np.array([self.root], dtype=self.parent_type), np.zeros(1, dtype=self.via_type))
        self._commit()
        return first

    def _live(self, frontier: Any) -> bool:
        """Whether the search goes on (some process has a frontier)."""
        return bool(int(frontier.shape[1]))

    def _level(self, frontier: Any, watch: LimitWatch, started: float) -> tuple[Any, str | None]:
        """Expand one level in chunks; return the next frontier and why the search stops, if it does."""
        base = self.stored - int(frontier.shape[1])
        following = []
        stopped = None
        start, total = 0, int(frontier.shape[1])
        while start < total:
            # --max-memory: a chunk that would pass it is made smaller, or not expanded (stop before it allocates)
            rows = self.forecast.rows(min(self.chunk, total - start), self._branching)
            if rows == 0:
                stopped = "max-memory"
                break
            transitions = self.stats.transitions or 0
            following.append(self._expand(frontier[:, start : start + rows], base + start))
            taken = (self.stats.transitions or 0) - transitions
            self.forecast.after(taken)
            self._branching = taken / rows
            start += rows
            stopped = self._should_stop(watch)
            if stopped is not None:
                break
            if self.progress is not None:
                seconds, waiting = (
                    time.monotonic() - started,
                    total - start + sum(int(block.shape[1]) for block in following),
                )
                self.progress(Statistics(self.stored, self.stats.transitions, self.depth, seconds, waiting))
        if len(following) > 1 and not self.links_on_device and not self.forecast.fits(_bytes(following)):
            # joining the level's blocks copies them: past --max-memory, what is stored stands, the rest is unknown
            return self.backend.empty_words(self.layout.words), "max-memory"
        following_frontier = (
            self.backend.concatenate(following, axis=1) if following else self.backend.empty_words(self.layout.words)
        )
        return following_frontier, stopped

    def _should_stop(self, watch: LimitWatch) -> str | None:
        properties = self.machine.properties
        if self.stop_at_first and first_violation(properties, self.found, self.watched):
            return FIRST_VIOLATION
        if len(self.found) == len(properties):
            return "all-found"
        return watch.exceeded(self.stored, every=1)  # a chunk is thousands of states: memory read each time

    def _expand(self, frontier: Any, base: int) -> Any:
        """Expand one chunk of a level (local indices from ``base``); return its new states."""
        candidates = self._successors(frontier, base)
        following = self.backend.empty_words(self.layout.words) if candidates is None else self._admit(*candidates)
        self._commit()
        return following

    def _global(self, local: Any) -> Any:
        """The global ids of states stored here at local indices ``local`` (one process: the same)."""
        return local

    # Discovery keys order the events of a chunk as the reference BFS meets them: state i is popped
    # (its deadlock checked: key i*(T+1)), then its transitions in tuple order t (key i*(T+1)+t+1)
    # add their successors, each checked when it is new. A successor reached from several parents
    # takes its least key (the reference's first discoverer), new states are stored in key order, and
    # each property keeps the event with the least key: the reference's counterexamples, exactly.
    def _key(self, rows: Any, tuple_id: Any) -> Any:
        return rows * (len(self.kernels.tuples) + 1) + (tuple_id + 1)

    def _offer(self, position: int, key: int, found: _Found) -> None:
        """A candidate finding of this chunk; the one with the least discovery key is kept."""
        if position in self.found:
            return
        pending = self._pending.get(position)
        if pending is None or key < pending[0]:
            self._pending[position] = (key, found)

    def _commit(self) -> None:
        for position, (_, found) in self._pending.items():
            self.found.setdefault(position, found)
        self._pending.clear()

    def _successors(self, frontier: Any, base: int) -> tuple[Any, Any, Any, Any] | None:
        """The distinct successors of a chunk: (states, fingerprints, least discovery keys, None) or,
        compact, (all successors, the new ones' fingerprints and keys, their columns); deadlocks,
        steps out of a sort and model errors are offered or raised on the way."""
        kernel = self.fused or self.native  # compiled kernels (GPU: Triton; CPU: C), where they are ready
        expansion = None if kernel is None else kernel.expand(frontier, self.stored)
        candidates = self._arrays(frontier, base) if expansion is None else self._from_fused(expansion, frontier, base)
        if candidates is None:
            return None
        backend = self.backend
        states, discovery = candidates
        # the native loop's successors come in discovery order: its set loops keep first occurrences
        native = self.native if expansion is not None and kernel is self.native else None
        sets = None if native is None else native.sets
        if sets is not None and self.visited.native is None:
            self.visited.attach(sets)
        exact = self.visited.exact
        if self.canonical is not None and self.canonical_keys is None:  # drop repeats first: fewer to canonicalise
            if native is None or sets is None or expansion is None:
                chosen, discovery = self.visited.unique(self.fingerprint(states), states, discovery)
                states = self.canonical(backend.columns(states, chosen))
            else:  # first occurrences, their representatives in C where the library has them
                chosen = sets.first_occurrences(expansion.fingerprints, states if exact else None)
                discovery, distinct = discovery[chosen], backend.columns(states, chosen)
                images = native.canonical(distinct)
                states = self.canonical(distinct) if images is None else images
        known = None if expansion is None or self.canonical is not None else expansion.fingerprints
        if self.canonical_keys is not None:  # one fused kernel: every successor's representative and key
            states, known = self.canonical_keys(states)
        keys = self.fingerprint(states) if known is None else known
        if sets is not None:  # still in discovery order: the first occurrences, then only they are sorted
            chosen = sets.first_occurrences(keys, states if exact else None)
            chosen = chosen[backend.argsort(keys[chosen])]
            keys, discovery = keys[chosen], discovery[chosen]
            if exact:
                return backend.columns(states, chosen), keys, discovery, None
            fresh = backend.nonzero(self.visited.absent(keys, None))
            return states, keys[fresh], discovery[fresh], chosen[fresh]
        if self.prefilter:  # a lookup is cheaper than sorting: drop the successors stored before first
            kept = backend.nonzero(self.visited.absent(keys, states))
            states, keys, discovery = backend.columns(states, kept), keys[kept], discovery[kept]
        elif not self.visited.exact:  # keys alone decide: only the new states are gathered, once (``_admit``)
            chosen, keys, discovery = self.visited.distinct(keys, None, discovery)
            fresh = backend.nonzero(self.visited.absent(keys, None))
            return states, keys[fresh], discovery[fresh], chosen[fresh]
        return (*self.visited.distinct(keys, states, discovery), None)

    def _from_fused(self, expansion: Expansion, frontier: Any, base: int) -> tuple[Any, Any] | None:
        """A chunk's successors and discovery keys from the fused kernels (no row failed or left a sort)."""
        backend = self.backend
        dead = backend.nonzero(~expansion.enabled)
        if len(dead):
            self._deadlocks(frontier[:, dead], base, dead)
        for tuple_id, count in enumerate(expansion.counts):
            if count:
                self.fired.add(self.kernels.tuples[tuple_id][0])
        total = sum(expansion.counts)
        self.stats.transitions = (self.stats.transitions or 0) + total
        if not total:
            return None
        return expansion.states, self._key(self._global(expansion.rows + base), expansion.via)

    def _arrays(self, frontier: Any, base: int) -> tuple[Any, Any] | None:
        """A chunk's successors and discovery keys from the array kernels."""
        backend, kernels = self.backend, self.kernels
        blocks, enabled, errors = kernels.expand(frontier)
        if errors:
            failing = [
                entry for entry, flagged in zip(errors, backend.flags([mask for _, mask, _ in errors])) if flagged
            ]
            if failing:
                self._model_error(frontier, failing)
        if enabled is not True:
            dead = backend.nonzero(~enabled) if enabled is not False else backend.arange(0, int(frontier.shape[1]))
            if len(dead):
                self._deadlocks(frontier[:, dead], base, dead)
        children, keys = [], []
        in_bounds = next(i for i, prop in enumerate(self.machine.properties) if prop.name == IN_BOUNDS)
        flagged = iter(
            backend.flags([out_of_bounds for _, _, _, out_of_bounds, _ in blocks if out_of_bounds is not None])
        )
        for tuple_id, rows, successors, out_of_bounds, count in blocks:
            self.stats.transitions = (self.stats.transitions or 0) + count
            self.fired.add(kernels.tuples[tuple_id][0])
            parents = self._global(rows + base)
            if out_of_bounds is not None and next(flagged):
                first = int(backend.nonzero(out_of_bounds)[0])
                parent = int(parents[first])
                self._offer(in_bounds, int(self._key(parent, tuple_id)), _Found(parent, tuple_id, depth=self.depth + 1))
                staying = ~out_of_bounds
                parents, successors = parents[staying], successors[:, staying]
            children.append(successors)
            keys.append(self._key(parents, tuple_id))
        if not children:
            return None
        return backend.concatenate(children, axis=1), backend.concatenate(keys)

    def _admit(self, states: Any, fingerprints: Any, discovery: Any, columns: Any | None) -> Any:
        """Store the candidates not seen before, in discovery order; return them. ``columns``, when
        given, are the candidates' columns of ``states`` (they are new: looked up already)."""
        backend = self.backend
        if self.prefilter or columns is not None:  # looked up already (``_successors``), nothing stored since
            fresh = backend.arange(0, int(fingerprints.shape[0]))
        else:
            fresh = backend.nonzero(self.visited.absent(fingerprints, states))
        by_discovery = backend.argsort(discovery[fresh])
        chosen = fresh[by_discovery]
        states = backend.columns(states, chosen if columns is None else columns[chosen])
        fingerprints, discovery = fingerprints[chosen], discovery[chosen]
        by_key = backend.empty_like(by_discovery)  # the candidates came in key order: undo the sort by discovery
        by_key[by_discovery] = backend.arange(0, int(by_discovery.shape[0]))
        if self.links_on_device:
            self._store(states, fingerprints, discovery, None, discovery, by_key)
            return states
        width = len(self.kernels.tuples) + 1
        keys = backend.to_numpy(discovery)
        self._store(
            states,
            fingerprints,
            (keys // width).astype(self.parent_type),
            (keys % width - 1).astype(self.via_type),
            keys,
            by_key,
        )
        return states

    def _store(
        self,
        states: Any,
        fingerprints: Any,
        parents: Any,
        via: np.ndarray | None,
        keys: Any | None = None,
        by_key: Any | None = None,
    ) -> None:
        """Store new states (``by_key``, when known, sorts their fingerprints) and check their properties;
        ``parents`` are their parents' ids and ``via`` the tuple ids, or ``parents`` their discovery keys
        and ``via`` None."""
        first = self.stored
        self.visited.add(fingerprints, states, by_key)
        self.parents.append(parents)
        self.via.append(via)
        self.stored += int(fingerprints.shape[0])
        if int(fingerprints.shape[0]):
            self._check_states(states, first, keys)

    def _check_states(self, states: Any, first: int, keys: Any | None) -> None:
        """Offer each property's first violation (or witness) among new states stored in discovery order."""
        values, error = (self.fused or self.native or self.kernels).predicates(states)
        if error is not False and bool(error.any() if hasattr(error, "any") else error):
            self._predicate_error(states, error)
        positions, masks = [], []
        for position, (prop, value) in enumerate(zip(self.machine.properties, values)):
            if position in self.found or value is None:
                continue
            positions.append(position)
            masks.append(
                value if prop.kind is PropertyKind.SOMETIMES else ~value if not isinstance(value, bool) else not value
            )
        for position, row in zip(positions, self.backend.first_rows(masks)):
            if row is not None:
                key = -1 if keys is None else int(keys[row])
                self._offer(
                    position, key, _Found(int(self._global(first + row)), depth=self.depth + (0 if keys is None else 1))
                )

    def _deadlocks(self, states: Any, base: int, rows: Any) -> None:
        values, error = self.kernels.deadlocked(states)
        if error is not False and bool(error.any() if hasattr(error, "any") else error):
            self._predicate_error(states, error)
        for position, value in enumerate(values):
            if value is None or position in self.found:
                continue
            row = self._first(~value if not isinstance(value, bool) else not value)
            if row is not None:
                state = int(self._global(base + int(rows[row])))
                self._offer(
                    position, state * (len(self.kernels.tuples) + 1), _Found(state, deadlock=True, depth=self.depth)
                )

    def _first(self, mask: Any) -> int | None:
        if isinstance(mask, bool):
            return 0 if mask else None
        hits = self.backend.nonzero(mask)
        return int(hits[0]) if len(hits) else None

    # ------------------------------------------------------------------------------- model errors
    def _model_error(self, frontier: Any, errors: list[tuple[int, Any, Any]]) -> None:
        """Re-run a state where a kernel's evaluation fails through the reference, which raises the
        model error; the kernel's rows are frontier rows, or rows of its successor block."""
        tuple_id, mask, rows = errors[0]
        row = 0 if isinstance(mask, bool) else int(self.backend.nonzero(mask)[0])
        if rows is not None:
            row = int(rows[row])
        state = self.layout.decode(self.backend.to_numpy(frontier[:, row]).tolist())
        reproduce_action_error(self.machine, state, *self.kernels.tuples[tuple_id])

    def _predicate_error(self, states: Any, error: Any) -> None:
        row = self._first(error)
        assert row is not None
        reproduce_property_error(self.machine, self.layout.decode(self.backend.to_numpy(states[:, row]).tolist()))

    # ------------------------------------------------------------------------------------ results
    def parent_of(self, state: int) -> tuple[int, int]:
        """The parent's global id and the tuple id that reached stored state ``state``."""
        if self._offsets is None or self._offsets[-1] != self.stored:
            self._offsets = np.cumsum([0] + [len(level) for level in self.parents])
        level = int(np.searchsorted(self._offsets, state, side="right")) - 1
        local = state - int(self._offsets[level])
        via = self.via[level]
        if via is None:  # a discovery key
            parent, tuple_id = divmod(int(self.parents[level][local]), len(self.kernels.tuples) + 1)
            return parent, tuple_id - 1
        return int(self.parents[level][local]), int(via[local])

    def chain(self, state: int) -> list[int]:
        """The tuple ids from the initial state to stored state ``state``."""
        steps: list[int] = []
        while True:
            parent, tuple_id = self.parent_of(state)
            if parent == self.root:
                break
            steps.append(tuple_id)
            state = parent
        steps.reverse()
        return steps

    def _result(self, complete: bool, bounded: bool, stopped: str | None) -> CheckResult:
        machine = self.machine
        builder = PathBuilder(machine, self.layout, self.kernels)
        results: list[PropertyResult] = []
        for position, prop in enumerate(machine.properties):
            if prop.kind is PropertyKind.LEADS_TO:
                detail = "leads-to is checked by --engine bfs"
                results.append(PropertyResult(prop.name, prop.kind, Verdict.INCONCLUSIVE, None, detail, prop.builtin))
                continue
            found = self.found.get(position)
            if found is None:
                results.append(property_verdict(prop, None, "", complete, bounded))
                continue
            path = builder.path(self.chain(found.state), found.extra)
            builder.confirm(position, path, found.deadlock)
            detail = "no action is enabled" if found.deadlock else ""
            if found.extra is not None:
                last = path.steps[-1]
                previous = path.steps[-2].state if len(path.steps) > 1 else path.initial
                leaving = next(
                    t
                    for t in builder.system.transitions(previous)
                    if t.target == last.state and t.out_of_bounds is not None
                )
                assert leaving.out_of_bounds is not None
                detail = bounds_detail(machine, leaving.out_of_bounds, path.final_state)
            results.append(property_verdict(prop, path, detail, complete, bounded))
        never_enabled = [action.name for position, action in enumerate(machine.actions) if position not in self.fired]
        warnings = [never_enabled_warning(name) for name in never_enabled]
        if not self.visited.exact and self.stored > 1:
            warnings.append(
                f"--compact: states are told apart by 64-bit fingerprints; the chance that one was omitted is at most "
                f"{omission_probability(self.stored):.1e}"
            )
        return CheckResult(
            machine,
            self.engine,
            results,
            self.stats,
            None if stopped == "all-found" else stopped,
            warnings,
            never_enabled,
        )

    @property
    def bytes_per_state(self) -> float:
        """Memory per stored state: the visited set, plus the parent index and tuple id."""
        return self.visited.bytes_per_state + (8 if self.links_on_device else 4 + np.dtype(self.via_type).itemsize)


__all__ = ["VectorSearch", "vectorisable"]
