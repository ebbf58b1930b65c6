"""The visited set of the vectorised engines: a sorted array of fingerprints, no Python objects.

Keys are 64-bit fingerprints of packed states, kept sorted; membership is ``searchsorted`` and a
level's new keys are merged in linearly (their final positions computed by ``searchsorted``, the
rest scattered around them). In the exact mode the full packed words sit beside the keys, in the
same order, and a fingerprint match counts only when the words match too: two different states
with one fingerprint are both kept (a slower path that never happens in practice, tested on a
deliberately weak fingerprint). In the compact mode (``--compact``) only the fingerprints are
kept: 8 bytes per state, at the price of a small chance that a state is taken for one already
seen (``omission_probability``).
"""

from __future__ import annotations

from typing import Any

from lockstep.checkers.vector.backend import Backend


def omission_probability(states: int) -> float:
    """The chance that two of ``states`` distinct states share a 64-bit fingerprint (the birthday
    bound), so that the compact mode may have skipped one."""
    return min(1.0, states * (states - 1) / 2 / 2.0**64)


class _Run:
    """One sorted run: keys ascending and, exact, the words of each key's state beside it."""

    def __init__(self, keys: Any, words: Any | None) -> None:
        self.keys = keys
        self.words = words

    def __len__(self) -> int:
        return int(self.keys.shape[0])


class VisitedSet:
    """Sorted fingerprints (and, exact, the words beside them) of every state stored so far.

    The set is a few sorted runs whose sizes at least double from the newest to the oldest (a
    log-structured merge): a level's new states become a run, and runs are merged while the newer
    is at least as large as the older, so a state is copied O(log n) times in all, not once a level.
    """

    def __init__(self, backend: Backend, words: int, exact: bool) -> None:
        self.backend = backend
        self.exact = exact
        self.word_count = words
        self.runs: list[_Run] = []
        self.size = 0
        self.collisions = False  # whether two stored states may share a fingerprint

    def __len__(self) -> int:
        return self.size

    @property
    def bytes_per_state(self) -> int:
        return 8 + (8 * self.word_count if self.exact else 0)

    def unique(self, keys: Any, states: Any) -> Any:
        """Indices (into ``keys``) of one occurrence of every distinct state, in key order."""
        backend = self.backend
        order = backend.argsort(keys)
        sorted_keys = keys[order]
        first = sorted_keys[1:] != sorted_keys[:-1]
        starts = backend.concatenate([backend.full(1, 1) == 1, first]) if len(sorted_keys) else first
        if not self.exact:
            return order[starts]
        sorted_states = states[:, order]
        same_words = (sorted_states[:, 1:] == sorted_states[:, :-1]).all(0)
        if bool((~first & ~same_words).any()):  # a fingerprint shared by different states
            _, chosen = backend.unique_rows(backend.concatenate([keys[None, :], states], axis=0))
            return chosen[backend.argsort(keys[chosen])]
        return order[starts]

    def absent(self, keys: Any, states: Any) -> Any:
        """A mask over distinct candidate states: those not stored yet."""
        seen = keys != keys
        for run in self.runs:
            seen |= self._in_run(run, keys, states)
        return ~seen

    def _in_run(self, run: _Run, keys: Any, states: Any) -> Any:
        backend = self.backend
        positions = backend.searchsorted(run.keys, keys)
        clipped = positions.clamp(max=len(run) - 1) if hasattr(positions, "clamp") else positions.clip(max=len(run) - 1)
        found = (positions < len(run)) & (run.keys[clipped] == keys)
        if not self.exact:
            return found
        assert run.words is not None
        matched = found & (run.words[:, clipped] == states).all(0)
        if self.collisions:
            suspects = backend.nonzero(found & ~matched)
            for candidate in backend.to_numpy(suspects).tolist():  # rare: scan the run of equal keys
                matched[candidate] = self._scan(run, keys[candidate], states[:, candidate], int(positions[candidate]))
        return matched

    def _scan(self, run: _Run, key: Any, state: Any, position: int) -> bool:
        assert run.words is not None
        while position < len(run) and bool(run.keys[position] == key):
            if bool((run.words[:, position] == state).all()):
                return True
            position += 1
        return False

    def add(self, keys: Any, states: Any) -> None:
        """Store new distinct states (``keys`` sorted, none stored yet)."""
        count = int(keys.shape[0])
        if count == 0:
            return
        if self.exact and not self.collisions and (count > 1 and bool((keys[1:] == keys[:-1]).any()) or self._shares_keys(keys)):
            self.collisions = True
        self.runs.append(_Run(keys, states if self.exact else None))
        self.size += count
        while len(self.runs) > 1 and len(self.runs[-1]) >= len(self.runs[-2]):
            newer = self.runs.pop()
            self.runs[-1] = self._merge(self.runs[-1], newer)

    def _shares_keys(self, keys: Any) -> bool:
        for run in self.runs:
            positions = self.backend.searchsorted(run.keys, keys)
            clipped = positions.clamp(max=len(run) - 1) if hasattr(positions, "clamp") else positions.clip(max=len(run) - 1)
            if bool(((positions < len(run)) & (run.keys[clipped] == keys)).any()):
                return True
        return False

    def _merge(self, older: _Run, newer: _Run) -> _Run:
        backend = self.backend
        total = len(older) + len(newer)
        destination = backend.searchsorted(older.keys, newer.keys) + backend.arange(0, len(newer))
        keep = backend.full(total, 1) == 1
        keep[destination] = False
        keys = backend.full(total, 0)
        keys[destination] = newer.keys
        keys[keep] = older.keys
        words = None
        if older.words is not None and newer.words is not None:
            words = backend.concatenate([older.words, newer.words], axis=1)  # the right shape and dtype
            words[:, destination] = newer.words
            words[:, keep] = older.words
        return _Run(keys, words)


__all__ = ["VisitedSet", "omission_probability"]
