"""The visited set of the vectorised engines: sorted arrays of fingerprints, no Python objects.

Keys are 64-bit fingerprints of packed states, kept in a few sorted runs; membership is
``searchsorted`` in each long run and, on numpy, one linear merge (a stable sort of the two sorted
arrays) with each run at most 8 times as long as the keys looked up; a level's new keys become a
run that is merged linearly with the runs no larger than itself. In the exact mode every state's
full packed words are kept too, in the order states were stored (append-only blocks of a fixed
number of states, so that growing never copies what is stored; the runs hold each key's index),
and a fingerprint match counts only when the words match: two different states with one
fingerprint are both kept (a slower path that never happens in practice, tested with a
deliberately weak fingerprint). In the compact mode (``--compact``) only the fingerprints are
kept: 8 bytes per state, at the price of a small chance that a state is taken for one already seen
(``omission_probability``). Once ``bfs-vec``'s native library is loaded (``attach``), look-ups
gallop through each run and merges run in C (``native_sets``), behind a filter of 4-8 bits per
stored state (a key whose bit is clear is new, and skips the runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from lockstep.checkers.vector.backend import Backend

if TYPE_CHECKING:
    from lockstep.checkers.vector.native_sets import NativeSets

_MERGE_RATIO = 8  # a run up to this many times as long as the keys looked up is merged with them, not searched


def omission_probability(states: int) -> float:
    """The chance that two of ``states`` distinct states share a 64-bit fingerprint (the birthday
    bound), so that the compact mode may have skipped one."""
    return min(1.0, states * (states - 1) / 2 / 2.0**64)


class _Run:
    """One sorted run: keys ascending and, exact, each key's index into the stored words."""

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

    hashed = False  # a hash table (``hashed.HashedFingerprints``), whose lookups cost less than a sort

    def __init__(self, backend: Backend, words: int, exact: bool) -> None:
        self.backend = backend
        self.exact = exact
        self.word_count = words
        self.runs: list[_Run] = []
        self.size = 0
        # exact: the words of states 0..size-1, ``1 << block_shift`` states per block, one state per row (so
        # a state's words lie together); the last block has spare room
        self.blocks: list[Any] = []
        self.block_shift = (backend.chunk * 8).bit_length() - 1  # eight chunks: 2**20 states on a CPU
        self.collisions = False  # whether two stored states may share a fingerprint
        self.native: NativeSets | None = None  # C look-ups and merges (numpy), once ``bfs-vec``'s library is loaded
        self.filter: Any = None  # with them: a bit per top-bits prefix of the stored keys (``attach``)
        self.filter_log = 0  # the filter's 2**filter_log bits: 4-8 per stored state

    def __len__(self) -> int:
        return self.size

    @property
    def bytes_per_state(self) -> float:
        filtered = 0.0 if self.filter is None else self.filter.nbytes / max(self.size, 1)
        return 8 + (8 * self.word_count + 8 if self.exact else 0) + filtered

    def attach(self, native: NativeSets) -> None:
        """Look up and merge with ``native``'s loops from now on, behind a filter of what is stored."""
        self.native = native
        self._refilter()

    def _refilter(self) -> None:
        """A filter of 4-8 bits per stored state (at least 2**16 bits), set from every run."""
        assert self.native is not None
        self.filter_log = max(16, (4 * self.size).bit_length())
        self.filter = np.zeros(1 << (self.filter_log - 6), dtype=np.uint64)
        for run in self.runs:
            self.native.filter_add(self.filter, self.filter_log, run.keys)

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

    def distinct(self, keys: Any, states: Any, discovery: Any) -> tuple[Any, Any, Any]:
        """``unique``'s states themselves: (the distinct states, their keys, each one's least
        ``discovery`` key), in key order; in the compact mode, given no ``states``, their indices.
        In the exact mode the states are gathered in key order once and neighbours compared, which
        is cheaper than gathering each repeated pair."""
        backend = self.backend
        order = backend.argsort(keys)
        sorted_keys = keys[order]
        first = sorted_keys[1:] != sorted_keys[:-1]
        starts = backend.concatenate([backend.full(1, 1) == 1, first]) if len(sorted_keys) else first
        least = backend.run_minimum(discovery[order], starts)
        if not self.exact:
            return (
                order[starts] if states is None else backend.columns(states, order[starts]),
                sorted_keys[starts],
                least,
            )
        ordered = backend.rows_of(states, order)  # (rows, words): a state's words side by side
        if len(first) and bool(((ordered[1:] != ordered[:-1]).any(1) & ~first).any()):
            chosen, least = self.unique(keys, states, discovery)  # a fingerprint shared by different states
            return backend.columns(states, chosen), keys[chosen], least
        return ordered[starts].T, sorted_keys[starts], least

    def absent(self, keys: Any, states: Any) -> Any:
        """A mask over distinct candidate states, given in ascending key order: those not stored yet."""
        seen = keys != keys
        if self.filter is not None and self.native is not None:  # only the keys whose bit is set can be stored
            maybe = self.backend.nonzero(self.native.filter_test(self.filter, self.filter_log, keys))
            keys = keys[maybe]
            states = None if states is None else states[:, maybe]
            found = keys != keys
            for run in self.runs:
                found |= self._in_run(run, keys, states)
            seen[maybe] = found
            return ~seen
        for run in self.runs:
            seen |= self._in_run(run, keys, states)
        return ~seen

    def _in_run(self, run: _Run, keys: Any, states: Any) -> Any:
        backend = self.backend
        if self.native is not None:  # one pass over the keys, galloping through the run
            positions = self.native.locate(run.keys, keys)
            found = positions >= 0
            clipped = _clip(positions, len(run) - 1, 0)
        elif backend.merges and len(run) <= _MERGE_RATIO * int(keys.shape[0]):
            # one linear merge of the two sorted arrays: the number of run keys up to each key
            order = backend.merge_order(backend.concatenate([run.keys, keys]))
            following = backend.nonzero(order >= len(run)) - backend.arange(0, int(keys.shape[0]))
            clipped = _clip(following - 1, len(run) - 1, 0)
            found = (following > 0) & (run.keys[clipped] == keys)
        else:
            positions = backend.searchsorted(run.keys, keys)
            clipped = _clip(positions, len(run) - 1)
            found = (positions < len(run)) & (run.keys[clipped] == keys)
        if not self.exact:
            return found
        assert run.indices is not None
        hits = backend.nonzero(found)
        same = (self._words(run.indices[clipped[hits]]) == states[:, hits]).all(0)
        if bool(same.all()):
            return found
        found[hits[~same]] = False
        self.collisions = True  # a stored state shares a key with another state
        for candidate in backend.to_numpy(hits[~same]).tolist():  # rare: scan the run of equal keys
            key = keys[candidate : candidate + 1]
            first = int(backend.searchsorted(run.keys, key)[0])
            found[candidate] = self._scan(run, key[0], states[:, candidate], first)
        return found

    def _scan(self, run: _Run, key: Any, state: Any, position: int) -> bool:
        assert run.indices is not None
        while position < len(run) and bool(run.keys[position] == key):
            index = int(run.indices[position])
            stored = self.blocks[index >> self.block_shift][index & ((1 << self.block_shift) - 1)]
            if bool((stored == state).all()):
                return True
            position += 1
        return False

    def add(self, keys: Any, states: Any, order: Any | None = None) -> None:
        """Store new distinct states (none stored yet), in this order; ``order``, when the caller
        knows it, sorts ``keys``."""
        backend = self.backend
        count = int(keys.shape[0])
        if count == 0:
            return
        if order is None:
            order = backend.argsort(keys)
        keys = keys[order]
        indices = None
        if self.exact:
            if not self.collisions and count > 1 and bool((keys[1:] == keys[:-1]).any()):
                self.collisions = True  # two new states share a key (``absent`` saw any shared with stored ones)
            self._append(states)
            indices = (backend.arange(self.size, self.size + count))[order]
        self.runs.append(_Run(keys, indices))
        self.size += count
        if self.filter is not None and self.native is not None:
            if 4 * self.size >= 1 << self.filter_log:  # fewer than 4 bits per state: twice as many
                self._refilter()
            else:
                self.native.filter_add(self.filter, self.filter_log, keys)
        while len(self.runs) > 1 and len(self.runs[-1]) >= len(self.runs[-2]):
            newer = self.runs.pop()
            self.runs[-1] = self._merge(self.runs[-1], newer)

    def _append(self, states: Any) -> None:
        """Copy ``states`` after the stored ones, into new blocks where the last one is full."""
        block = 1 << self.block_shift
        written, count = 0, int(states.shape[1])
        while written < count:
            filled = (self.size + written) & (block - 1)
            if filled == 0 and (self.size + written) >> self.block_shift == len(self.blocks):
                self.blocks.append(self.backend.empty_table(block, self.word_count))  # a state per row
            taken = min(block - filled, count - written)
            self.blocks[-1][filled : filled + taken] = states[:, written : written + taken].T
            written += taken

    def _words(self, indices: Any) -> Any:
        """The stored words of the states at ``indices`` (a (words, len(indices)) array)."""
        if len(self.blocks) == 1:
            return self.blocks[0][indices].T
        backend = self.backend
        numbers, offsets = indices >> self.block_shift, indices & ((1 << self.block_shift) - 1)
        result = backend.empty_table(int(indices.shape[0]), self.word_count)
        for number, words in enumerate(self.blocks):
            chosen = backend.nonzero(numbers == number)
            if len(chosen):
                result[chosen] = words[offsets[chosen]]
        return result.T

    def _merge(self, older: _Run, newer: _Run) -> _Run:
        backend = self.backend
        if self.native is not None:
            return _Run(*self.native.merge(older.keys, older.indices, newer.keys, newer.indices))
        if backend.merges:  # one linear merge of the two sorted runs
            order = backend.merge_order(backend.concatenate([older.keys, newer.keys]))
            keys = backend.concatenate([older.keys, newer.keys])[order]
            if older.indices is None or newer.indices is None:
                return _Run(keys, None)
            return _Run(keys, backend.concatenate([older.indices, newer.indices])[order])
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


def _clip(positions: Any, highest: int, lowest: int | None = None) -> Any:
    if hasattr(positions, "clamp"):
        return positions.clamp(min=lowest, max=highest)
    return positions.clip(lowest, highest)


__all__ = ["VisitedSet", "omission_probability"]
