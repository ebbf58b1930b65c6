"""Set primitives of ``bfs-vec`` in C: a chunk's first occurrences, and sorted-run look-ups and merges.

The array kernels find a chunk's distinct successors by sorting all of them (numpy's ``argsort``),
look the distinct ones up in the visited runs by a stable sort of each run with the keys, and merge
runs the same way; on one CPU core those sorts cost more than computing the successors. These
loops do the same work without sorting what does not need it, and decide exactly what the array
primitives decide:

- ``first_occurrences``: the successors of a chunk come out of the native loop in discovery order,
  so the first occurrence of each distinct state is the one with the least discovery key, which is
  the one the search keeps. A hash table of the chunk's successor indices (tagged with the call's
  number, so that it is never cleared) finds them in one pass; states match when their
  fingerprints do and, in the exact mode, their words too.
- ``locate``: ascending keys looked up in one sorted run, each from where the previous one was
  found (galloping), so that a look-up costs the logarithm of the gap, not of the run.
- ``filter_add``/``filter_test``: a bitmap indexed by a key's top bits (a Bloom filter with one
  hash: keys are fingerprints, uniform already), set for every stored key; a key whose bit is clear
  is not stored, so most new states skip the runs. Sorted keys read it front to back.
- ``merge``: two sorted runs (and, exact, their indices) merged, the older run's key first among
  equal ones, as the stable sort of the two would order them.

The C text is compiled into each model's native library (``native.py``) and wrapped here.
"""

from __future__ import annotations

import ctypes

import numpy as np

SETS_SOURCE = """
static inline int first_seen(i64 KEY, const i64 *NEW, i64 NEW_STRIDE, i64 WORDS, i64 AT, const i64 *STORED,
                             i64 STORED_STRIDE, const i64 *KEYS, i64 *TABLE, i64 BITS, i64 TAG) {
    u64 MASK = ((u64)1 << BITS) - 1;
    u64 SLOT = ((u64)KEY * 0x9E3779B97F4A7C15ULL) >> (64 - BITS);
    for (;;) {
        i64 ENTRY = TABLE[SLOT];
        if ((ENTRY >> 32) != TAG) {
            TABLE[SLOT] = (TAG << 32) | AT;
            return 1;
        }
        i64 J = ENTRY & 0xFFFFFFFFLL;
        if (KEYS[J] == KEY) {
            i64 WORD = 0;
            while (WORD < WORDS && STORED[WORD * STORED_STRIDE + J] == NEW[WORD * NEW_STRIDE]) WORD++;
            if (WORD == WORDS) return 0;
        }
        SLOT = (SLOT + 1) & MASK;
    }
}

i64 first_occurrences(const i64 *KEYS, i64 N, const i64 *WORDS, i64 STRIDE, i64 COUNT,
                      i64 *TABLE, i64 BITS, i64 TAG, i64 *OUT) {
    i64 FOUND = 0;
    for (i64 I = 0; I < N; I++) {
        const i64 *NEW = COUNT ? WORDS + I : WORDS;
        if (first_seen(KEYS[I], NEW, STRIDE, COUNT, I, WORDS, STRIDE, KEYS, TABLE, BITS, TAG)) OUT[FOUND++] = I;
    }
    return FOUND;
}

void locate(const i64 *RUN, i64 LENGTH, const i64 *KEYS, i64 N, i64 *POSITIONS) {
    i64 AT = 0;
    for (i64 I = 0; I < N; I++) {
        i64 KEY = KEYS[I];
        i64 STEP = 1, HIGH = AT;
        while (HIGH < LENGTH && RUN[HIGH] < KEY) { AT = HIGH + 1; HIGH += STEP; STEP <<= 1; }
        if (HIGH > LENGTH) HIGH = LENGTH;
        while (AT < HIGH) {
            i64 MIDDLE = AT + (HIGH - AT) / 2;
            if (RUN[MIDDLE] < KEY) AT = MIDDLE + 1; else HIGH = MIDDLE;
        }
        POSITIONS[I] = (AT < LENGTH && RUN[AT] == KEY) ? AT : -1;
    }
}

void filter_add(const i64 *KEYS, i64 N, u64 *BITMAP, i64 LOG) {
    for (i64 I = 0; I < N; I++) {
        u64 BIT = (u64)KEYS[I] >> (64 - LOG);
        BITMAP[BIT >> 6] |= (u64)1 << (BIT & 63);
    }
}

void filter_test(const i64 *KEYS, i64 N, const u64 *BITMAP, i64 LOG, int8_t *MAYBE) {
    for (i64 I = 0; I < N; I++) {
        u64 BIT = (u64)KEYS[I] >> (64 - LOG);
        MAYBE[I] = (int8_t)((BITMAP[BIT >> 6] >> (BIT & 63)) & 1);
    }
}

void merge(const i64 *OLDER, const i64 *OLDER_INDICES, i64 OLDER_LENGTH, const i64 *NEWER,
           const i64 *NEWER_INDICES, i64 NEWER_LENGTH, i64 *KEYS, i64 *INDICES) {
    i64 A = 0, B = 0, AT = 0;
    while (A < OLDER_LENGTH || B < NEWER_LENGTH) {
        int OLD = B >= NEWER_LENGTH || (A < OLDER_LENGTH && OLDER[A] <= NEWER[B]);
        if (OLD) { KEYS[AT] = OLDER[A]; if (INDICES) INDICES[AT] = OLDER_INDICES[A]; A++; }
        else { KEYS[AT] = NEWER[B]; if (INDICES) INDICES[AT] = NEWER_INDICES[B]; B++; }
        AT++;
    }
}
"""

_SMALLEST_TABLE = 16  # bits: 65,536 slots (512 KiB)


def _address(array: np.ndarray | None) -> int | None:
    return None if array is None else array.ctypes.data


class NativeSets:
    """The set loops of one loaded native library (``SETS_SOURCE`` compiled into it)."""

    def __init__(self, library: ctypes.CDLL) -> None:
        pointer, integer = ctypes.c_void_p, ctypes.c_int64
        self._first = library.first_occurrences
        self._first.argtypes = [pointer, integer, pointer, integer, integer, pointer, integer, integer, pointer]
        self._first.restype = integer
        self._locate = library.locate
        self._locate.argtypes = [pointer, integer, pointer, integer, pointer]
        self._locate.restype = None
        self._merge = library.merge
        self._merge.argtypes = [pointer, pointer, integer, pointer, pointer, integer, pointer, pointer]
        self._merge.restype = None
        self._filter_add = library.filter_add
        self._filter_add.argtypes = [pointer, integer, pointer, integer]
        self._filter_add.restype = None
        self._filter_test = library.filter_test
        self._filter_test.argtypes = [pointer, integer, pointer, integer, pointer]
        self._filter_test.restype = None
        self.bits = _SMALLEST_TABLE
        self.table = np.zeros(1 << self.bits, dtype=np.int64)
        self.tag = 0

    def fresh_table(self, count: int) -> tuple[int, int, int]:
        """The table (its address), its bits and a new tag, for a pass over ``count`` entries."""
        if count >= 1 << 31:
            raise ValueError(f"{count} successors in one chunk: more than the table's indices hold")
        while 2 * count > len(self.table):
            self.bits += 1
            self.table = np.zeros(1 << self.bits, dtype=np.int64)
            self.tag = 0
        self.tag += 1
        return self.table.ctypes.data, self.bits, self.tag

    def first_occurrences(self, keys: np.ndarray, states: np.ndarray | None) -> np.ndarray:
        """The indices of the first occurrence of every distinct state among ``keys`` (and, when
        given, ``states``: words x rows, rows matching only when their words do), ascending."""
        count = int(keys.shape[0])
        table = self.fresh_table(count)
        keys = np.ascontiguousarray(keys)
        words, stride = 0, 0
        if states is not None:
            if states.strides[1] != states.itemsize:
                states = np.ascontiguousarray(states)
            words, stride = int(states.shape[0]), states.strides[0] // states.itemsize
        out = np.empty(count, dtype=np.int64)
        found = self._first(
            keys.ctypes.data,
            count,
            _address(states),
            stride,
            words,
            *table,
            out.ctypes.data,
        )
        return out[:found]

    def locate(self, run: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """For ascending ``keys``: each one's position in the sorted ``run``, or -1 where it is absent."""
        keys = np.ascontiguousarray(keys)
        positions = np.empty(int(keys.shape[0]), dtype=np.int64)
        self._locate(run.ctypes.data, len(run), keys.ctypes.data, len(keys), positions.ctypes.data)
        return positions

    def filter_add(self, bitmap: np.ndarray, log: int, keys: np.ndarray) -> None:
        """Set the bits of ``keys`` (each one's top ``log`` bits) in ``bitmap``."""
        keys = np.ascontiguousarray(keys)
        self._filter_add(keys.ctypes.data, len(keys), bitmap.ctypes.data, log)

    def filter_test(self, bitmap: np.ndarray, log: int, keys: np.ndarray) -> np.ndarray:
        """A mask over ``keys``: those whose bit is set (perhaps stored; the others are not)."""
        keys = np.ascontiguousarray(keys)
        maybe = np.empty(len(keys), dtype=np.int8)
        self._filter_test(keys.ctypes.data, len(keys), bitmap.ctypes.data, log, maybe.ctypes.data)
        return maybe.view(np.bool_)

    def merge(
        self, older: np.ndarray, older_indices: np.ndarray | None, newer: np.ndarray, newer_indices: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Two sorted runs merged (the older one's key first among equal ones), with their indices
        when both have them."""
        total = len(older) + len(newer)
        keys = np.empty(total, dtype=np.int64)
        both = older_indices is not None and newer_indices is not None
        indices = np.empty(total, dtype=np.int64) if both else None
        self._merge(
            older.ctypes.data,
            _address(older_indices) if both else None,
            len(older),
            newer.ctypes.data,
            _address(newer_indices) if both else None,
            len(newer),
            keys.ctypes.data,
            _address(indices),
        )
        return keys, indices


__all__ = ["SETS_SOURCE", "NativeSets"]
