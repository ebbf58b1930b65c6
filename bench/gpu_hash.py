"""The ``--compact`` visited set on a device: the hash table (``hashed.py``) against sorted runs.

``python bench/gpu_hash.py [--states N] [--batch B] [--blocks 128 256 1024]``: stores N distinct
random fingerprints in batches of B (each batch looked up first, as a search level does), with the
hash table at each probe block size and with the sorted runs of ``visited.py``; prints the seconds
of lookups and stores, the bytes per state, and checks that every stored key is found and that
fresh keys are not. Needs CUDA and Triton."""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from lockstep.checkers.vector import hashed
from lockstep.checkers.vector.backend import TorchBackend
from lockstep.checkers.vector.visited import VisitedSet


def run(visited: Any, batches: list[Any]) -> tuple[float, float]:
    looking = storing = 0.0
    for keys in batches:
        torch.cuda.synchronize()
        began = time.perf_counter()
        fresh = visited.absent(keys, None)
        torch.cuda.synchronize()
        looking += time.perf_counter() - began
        assert bool(fresh.all()), "a fresh key was found"
        began = time.perf_counter()
        visited.add(keys, None)
        torch.cuda.synchronize()
        storing += time.perf_counter() - began
    for keys in batches[:: max(1, len(batches) // 8)]:
        assert not bool(visited.absent(keys, None).any()), "a stored key was not found"
    return looking, storing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--states", type=int, default=200_000_000)
    parser.add_argument("--batch", type=int, default=4_000_000)
    parser.add_argument("--blocks", type=int, nargs="*", default=[128, 256, 1024])
    options = parser.parse_args()
    generator = torch.Generator(device="cuda").manual_seed(7)
    keys = torch.randint(-(2**63), 2**63 - 1, (options.states,), device="cuda", generator=generator)
    keys = torch.unique(keys)  # distinct (and sorted, as a search's batches are)
    batches = [keys[start : start + options.batch].sort().values for start in range(0, len(keys), options.batch)]
    backend = TorchBackend("cuda")
    print(f"{len(keys):,} keys in {len(batches)} batches, {torch.cuda.get_device_name()}")
    for block in options.blocks:
        hashed._PROBE_BLOCK = block
        table = hashed.HashedFingerprints(backend, 1, torch)
        run(table, batches[:2])  # compiles the kernels
        table = hashed.HashedFingerprints(backend, 1, torch)
        looking, storing = run(table, batches)
        print(
            f"  hash table, {block} keys per program: lookups {looking:.2f} s, stores {storing:.2f} s, "
            f"{(len(keys)) / (looking + storing) / 1e6:.0f}M keys/s, {table.bytes_per_state:.1f} B/state"
        )
    runs = VisitedSet(backend, 1, exact=False)
    looking, storing = run(runs, batches)
    print(
        f"  sorted runs: lookups {looking:.2f} s, stores {storing:.2f} s, "
        f"{len(keys) / (looking + storing) / 1e6:.0f}M keys/s, {runs.bytes_per_state} B/state"
    )


if __name__ == "__main__":
    main()
