"""``bfs-gpu``'s device primitives in Triton: the fingerprint kernel, and the ``--compact`` visited set
as an open-addressing hash table.

``fingerprint`` computes the backends' 64-bit mix (``backend.py``) in one pass over a (words, rows)
tensor, where torch's array operations take a dozen passes and as many temporaries. A state's
fingerprint is the same on every device and in every process, so the CPU backends and this kernel
give equal values (``tests/test_vector_fused.py`` holds them to it).

``HashedFingerprints`` keeps the fingerprints of a compact search in a table of ``2**k`` int64
slots, probed linearly from the fingerprint's top bits (Fibonacci hashing), 0 marking an empty
slot; a fingerprint that is 0 is stored as ``_ZERO_STAND_IN`` (so that one fingerprint in ``2**64``
is taken for another: the compact mode's omission bound covers it). A lookup is one kernel that only
reads; a store is one kernel whose lanes claim empty slots with compare-and-swap (the keys of a
store are distinct, so two lanes never race for one key). The table doubles, re-inserting what it
holds, before it would be more than half full. Compared with sorted runs, a lookup is one or two
probes instead of a binary search in every run, and a store never merges. It needs Triton (CUDA,
or Triton's interpreter on the CPU, as the fused kernels do); this module imports it.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from lockstep.checkers.vector.backend import Backend
from lockstep.checkers.vector.visited import VisitedSet

# constants the kernels read (Triton reads only constexpr globals)
_SEED = tl.constexpr(0x9E3779B97F4A7C15)
_MULTIPLY_1 = tl.constexpr(0xBF58476D1CE4E5B9)
_MULTIPLY_2 = tl.constexpr(0x94D049BB133111EB)
_FIBONACCI = tl.constexpr(0x9E3779B97F4A7C15)  # 2**64 / the golden ratio, odd
_ZERO_STAND_IN = tl.constexpr(0x5BD1E9955BD1E995)  # the slot value of a fingerprint that is 0 (0 marks an empty slot)
_BLOCK = 1024  # rows per program of the fingerprint kernel
_PROBE_BLOCK = 128  # keys per program of a lookup or store (a program loops until its slowest key is placed)
_FIRST_BITS = 20  # the table's first size: 2**20 slots (8 MiB)


@triton.jit  # type: ignore[untyped-decorator]  # Triton reads the parameters' annotations: these stay bare
def _fingerprint_kernel(words, rows, stride, out, WORDS: tl.constexpr, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    valid = offsets < rows
    hashed = tl.full([BLOCK], _SEED, tl.uint64)
    for word in tl.static_range(WORDS):
        value = tl.load(words + word * stride + offsets, mask=valid, other=0).to(tl.uint64, bitcast=True)
        hashed = (hashed ^ value) * _MULTIPLY_1
        hashed = hashed ^ (hashed >> 32)
    hashed = hashed ^ (hashed >> 29)
    hashed = hashed * _MULTIPLY_2
    hashed = hashed ^ (hashed >> 32)
    tl.store(out + offsets, hashed.to(tl.int64, bitcast=True), mask=valid)


@triton.jit  # type: ignore[untyped-decorator]
def _probe_kernel(table, bits, keys, count, found, spare, STORE: tl.constexpr, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    """Look each key up (``found``: 1 where the table holds it) or, with STORE, insert it (``found``:
    1 where it was there already). Compare-and-swap has no mask: a lane that is not claiming an
    empty slot swaps at its current slot, which is occupied and stays so (nothing is ever removed),
    and a lane past the keys at its own ``spare`` slot (a 1): neither changes anything."""
    lanes = tl.arange(0, BLOCK)
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + lanes
    valid = offsets < count
    key = tl.load(keys + offsets, mask=valid, other=1)
    key = tl.where(key == 0, _ZERO_STAND_IN, key)
    mask = (tl.full([BLOCK], 1, tl.uint64) << bits.to(tl.uint64)) - 1
    slot = ((key.to(tl.uint64, bitcast=True) * _FIBONACCI) >> (64 - bits).to(tl.uint64)) & mask
    done = ~valid
    present = tl.zeros([BLOCK], tl.int1)
    while tl.max((~done).to(tl.int32), axis=0) > 0:
        address = table + slot.to(tl.int64)
        seen = tl.load(address, mask=~done, other=1)
        present = present | (~done & (seen == key))
        if STORE:
            claim = ~done & (seen == 0)
            won = claim & (claim != claim)
            if tl.max(claim.to(tl.int32), axis=0) > 0:  # compare-and-swap only where some lane can claim
                target = tl.where(valid, address, spare + lanes)
                previous = tl.atomic_cas(target, tl.zeros([BLOCK], tl.int64), key)
                won = claim & (previous == 0)
                present = present | (claim & (previous == key))
            done = done | won | present
        else:
            done = done | present | (seen == 0)
        slot = tl.where(done, slot, (slot + 1) & mask)
    tl.store(found + offsets, present.to(tl.int8), mask=valid)


def fingerprint(torch: Any, words: Any) -> Any:
    """The fingerprints of a (words, rows) int64 tensor, as ``Backend.fingerprint`` computes them."""
    rows = int(words.shape[1])
    out = torch.empty(rows, dtype=torch.int64, device=words.device)
    if rows:
        if words.stride(1) != 1:
            words = words.contiguous()
        grid = ((rows + _BLOCK - 1) // _BLOCK,)
        _fingerprint_kernel[grid](words, rows, int(words.stride(0)), out, int(words.shape[0]), _BLOCK)
    return out


class HashedFingerprints(VisitedSet):
    """The compact visited set as a hash table on the device (the in-chunk dedup is ``VisitedSet``'s)."""

    hashed = True  # the search looks a chunk's successors up before it sorts them

    def __init__(self, backend: Backend, words: int, torch: Any, first_bits: int = _FIRST_BITS) -> None:
        super().__init__(backend, words, exact=False)
        self.torch = torch
        self.device = backend.device
        self.bits = first_bits
        self.table = torch.zeros(1 << self.bits, dtype=torch.int64, device=self.device)
        self.block = _PROBE_BLOCK
        self.spare = torch.ones(self.block, dtype=torch.int64, device=self.device)  # lanes past the keys swap here

    @property
    def bytes_per_state(self) -> float:
        """The table's bytes per stored state (between 16 and 32 once it has grown)."""
        return 8 * int(self.table.shape[0]) / max(self.size, 1)

    def absent(self, keys: Any, states: Any) -> Any:
        return self._probe(self.table, self.bits, keys, store=False) == 0

    def add(self, keys: Any, states: Any, order: Any | None = None) -> None:
        count = int(keys.shape[0])
        if count == 0:
            return
        while 2 * (self.size + count) > int(self.table.shape[0]):
            self._grow()
        self._probe(self.table, self.bits, keys, store=True)
        self.size += count

    def _grow(self) -> None:
        """Twice the slots; what the table holds is inserted again (0 marks an empty slot, and a
        stored fingerprint of 0 is already its stand-in, which hashes as itself)."""
        held = self.table[self.table != 0]
        self.bits += 1
        self.table = self.torch.zeros(1 << self.bits, dtype=self.torch.int64, device=self.device)
        self._probe(self.table, self.bits, held, store=True)

    def _probe(self, table: Any, bits: int, keys: Any, store: bool) -> Any:
        count = int(keys.shape[0])
        found = self.torch.empty(count, dtype=self.torch.int8, device=self.device)
        if count:
            grid = ((count + self.block - 1) // self.block,)
            _probe_kernel[grid](table, bits, keys.contiguous(), count, found, self.spare, store, self.block)
        return found


__all__ = ["HashedFingerprints", "fingerprint"]
