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


class VisitedSet:
    """Sorted fingerprints (and, exact, the words beside them) of every state stored so far."""

    def __init__(self, backend: Backend, words: int, exact: bool) -> None:
        self.backend = backend
        self.exact = exact
        self.keys = backend.empty()
        self.words = backend.empty_words(words) if exact else None
        self.collisions = False  # whether two stored states share a fingerprint

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    @property
    def bytes_per_state(self) -> int:
        return 8 + (8 * int(self.words.shape[0]) if self.words is not None else 0)

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
        """A mask over distinct candidate states (``keys`` sorted): those not stored yet."""
        backend = self.backend
        if len(self) == 0:
            return keys == keys
        positions = backend.searchsorted(self.keys, keys)
        inside = positions < len(self)
        clipped = positions.clamp(max=len(self) - 1) if hasattr(positions, "clamp") else positions.clip(max=len(self) - 1)
        found = inside & (self.keys[clipped] == keys)
        if not self.exact:
            return ~found
        assert self.words is not None
        matched = found & (self.words[:, clipped] == states).all(0)
        if self.collisions:
            suspects = backend.nonzero(found & ~matched)
            for candidate in backend.to_numpy(suspects).tolist():  # rare: scan the run of equal keys
                matched[candidate] = self._contains(keys[candidate], states[:, candidate], int(positions[candidate]))
        return ~matched

    def _contains(self, key: Any, state: Any, position: int) -> bool:
        assert self.words is not None
        while position < len(self) and bool(self.keys[position] == key):
            if bool((self.words[:, position] == state).all()):
                return True
            position += 1
        return False

    def add(self, keys: Any, states: Any) -> None:
        """Merge new distinct states (``keys`` sorted, none stored yet) into the set."""
        backend = self.backend
        count = int(keys.shape[0])
        if count == 0:
            return
        if self.exact and len(self):
            positions = backend.searchsorted(self.keys, keys)
            inside = positions < len(self)
            clipped = positions.clamp(max=len(self) - 1) if hasattr(positions, "clamp") else positions.clip(max=len(self) - 1)
            if bool((inside & (self.keys[clipped] == keys)).any()):
                self.collisions = True
        total = len(self) + count
        destination = backend.searchsorted(self.keys, keys) + backend.arange(0, count)
        keep = backend.full(total, 1) == 1
        keep[destination] = False
        merged = backend.full(total, 0)
        merged[destination] = keys
        merged[keep] = self.keys
        self.keys = merged
        if self.words is not None:
            words = backend.concatenate([self.words, states], axis=1)  # the right shape and dtype
            words[:, destination] = states
            words[:, keep] = self.words
            self.words = words
        if count > 1 and bool((keys[1:] == keys[:-1]).any()):
            self.collisions = True


__all__ = ["VisitedSet", "omission_probability"]
