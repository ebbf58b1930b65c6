"""The visited set of the vectorised engines: sorted arrays of fingerprints, no Python objects.

Keys are 64-bit fingerprints of packed states, kept in a few sorted runs; membership is
``searchsorted`` in each run, and a level's new keys become a run that is merged linearly with the
runs no larger than itself. In the exact mode every state's full packed words are kept too, in the
order states were stored (an append-only buffer; the runs hold each key's index into it), and a
fingerprint match counts only when the words match: two different states with one fingerprint
are both kept (a slower path that never happens in practice, tested with a deliberately weak
fingerprint). In the compact mode (``--compact``) only the fingerprints are kept: 8 bytes per
state, at the price of a small chance that a state is taken for one already seen
(``omission_probability``).
"""

from __future__ import annotations

from typing import Any

from lockstep.checkers.vector.backend import Backend


def omission_probability(states: int) -> float:
    """The chance that two of ``states`` distinct states share a 64-bit fingerprint (the birthday
    bound), so that the compact mode may have skipped one."""
    return min(1.0, states * (states - 1) / 2 / 2.0**64)


class _Run:
    """One sorted run: keys ascending and, exact, each key's index into the words buffer."""

    def __init__(self, keys: Any, indices: Any | None) -> None:
        self.keys = keys
        self.indices = indices

    def __len__(self) -> int:
        return int(self.keys.shape[0])


class VisitedSet:
    """Sorted fingerprints (and, exact, the words of every state) of everything stored so far.

    The runs' sizes at least double from the newest to the oldest (a log-structured merge): a
    state's key is copied O(log n) times in all, not once a level; its words never move.
    """

    def __init__(self, backend: Backend, words: int, exact: bool) -> None:
        self.backend = backend
        self.exact = exact
        self.word_count = words
        self.runs: list[_Run] = []
        self.size = 0
        self.buffer = backend.empty_words(words) if exact else None  # words of states 0..size-1, then spare room
        self.collisions = False  # whether two stored states may share a fingerprint

    def __len__(self) -> int:
        return self.size

    @property
    def bytes_per_state(self) -> int:
        return 8 + (8 * self.word_count + 8 if self.exact else 0)

    def unique(self, keys: Any, states: Any, discovery: Any) -> tuple[Any, Any]:
        """One occurrence of every distinct state: (indices into ``keys``, in key order; each one's
        least ``discovery`` key among its occurrences)."""
        backend = self.backend
        order = backend.argsort(keys)
        sorted_keys = keys[order]
        first = sorted_keys[1:] != sorted_keys[:-1]
        starts = backend.concatenate([backend.full(1, 1) == 1, first]) if len(sorted_keys) else first
        if self.exact:
            repeated = backend.nonzero(~first)  # equal keys side by side: are the states equal too?
            if len(repeated):
                later, earlier = order[repeated + 1], order[repeated]
                if bool((states[:, later] != states[:, earlier]).any()):  # a fingerprint shared by different states
                    chosen, groups = backend.unique_rows(backend.concatenate([keys[None, :], states], axis=0))
                    least = backend.group_minimum(discovery, groups, int(chosen.shape[0]))
                    by_key = backend.argsort(keys[chosen])
                    return chosen[by_key], least[by_key]
        return order[starts], backend.run_minimum(discovery[order], starts)

    def absent(self, keys: Any, states: Any) -> Any:
        """A mask over distinct candidate states: those not stored yet."""
        seen = keys != keys
        for run in self.runs:
            seen |= self._in_run(run, keys, states)
        return ~seen

    def _in_run(self, run: _Run, keys: Any, states: Any) -> Any:
        backend = self.backend
        positions = backend.searchsorted(run.keys, keys)
        clipped = _clip(positions, len(run) - 1)
        found = (positions < len(run)) & (run.keys[clipped] == keys)
        if not self.exact:
            return found
        assert run.indices is not None and self.buffer is not None
        hits = backend.nonzero(found)
        same = (self.buffer[:, run.indices[clipped[hits]]] == states[:, hits]).all(0)
        found[hits[~same]] = False
        if not bool(same.all()):
            self.collisions = True  # a stored state shares a key with another state
        if self.collisions and not bool(same.all()):
            for candidate in backend.to_numpy(hits[~same]).tolist():  # rare: scan the run of equal keys
                found[candidate] = self._scan(run, keys[candidate], states[:, candidate], int(positions[candidate]))
        return found

    def _scan(self, run: _Run, key: Any, state: Any, position: int) -> bool:
        assert run.indices is not None and self.buffer is not None
        while position < len(run) and bool(run.keys[position] == key):
            if bool((self.buffer[:, int(run.indices[position])] == state).all()):
                return True
            position += 1
        return False

    def add(self, keys: Any, states: Any) -> None:
        """Store new distinct states (none stored yet), in this order."""
        backend = self.backend
        count = int(keys.shape[0])
        if count == 0:
            return
        order = backend.argsort(keys)
        keys = keys[order]
        indices = None
        if self.exact:
            if not self.collisions and count > 1 and bool((keys[1:] == keys[:-1]).any()):
                self.collisions = True  # two new states share a key (``absent`` saw any shared with stored ones)
            assert self.buffer is not None
            capacity = int(self.buffer.shape[1])
            if self.size + count > capacity:  # grow geometrically (old and new live together for a moment)
                grown = backend.zeros_words(self.word_count, max(capacity + capacity // 2, self.size + count, 1024))
                grown[:, : self.size] = self.buffer[:, : self.size]
                self.buffer = grown
            self.buffer[:, self.size : self.size + count] = states
            indices = (backend.arange(self.size, self.size + count))[order]
        self.runs.append(_Run(keys, indices))
        self.size += count
        while len(self.runs) > 1 and len(self.runs[-1]) >= len(self.runs[-2]):
            newer = self.runs.pop()
            self.runs[-1] = self._merge(self.runs[-1], newer)

    def _merge(self, older: _Run, newer: _Run) -> _Run:
        backend = self.backend
        total = len(older) + len(newer)
        destination = backend.searchsorted(older.keys, newer.keys) + backend.arange(0, len(newer))
        keep = backend.full(total, 1) == 1
        keep[destination] = False
        keys = backend.full(total, 0)
        keys[destination] = newer.keys
        keys[keep] = older.keys
        indices = None
        if older.indices is not None and newer.indices is not None:
            indices = backend.full(total, 0)
            indices[destination] = newer.indices
            indices[keep] = older.indices
        return _Run(keys, indices)


def _clip(positions: Any, highest: int) -> Any:
    return positions.clamp(max=highest) if hasattr(positions, "clamp") else positions.clip(max=highest)


__all__ = ["VisitedSet", "omission_probability"]
