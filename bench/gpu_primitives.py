"""Throughput of the device primitives the visited set is built from, at the sizes a search meets.

``python bench/gpu_primitives.py [--keys N] [--stored N]``: prints, on the first CUDA device, the
seconds of a stable argsort of N random int64 keys, of ``searchsorted`` of N keys into a sorted
array of M, and of a gather of N rows; each is timed over 5 repetitions after one warm-up, the
device synchronised around each. These bound what a level of ``bfs-gpu`` can cost."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch


def timed(function: Callable[[], Any], repeat: int = 5) -> float:
    function()
    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(repeat):
        function()
    torch.cuda.synchronize()
    return (time.perf_counter() - began) / repeat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=8 << 20)
    parser.add_argument("--stored", type=int, default=300_000_000)
    options = parser.parse_args()
    device = "cuda"
    generator = torch.Generator(device=device).manual_seed(1)
    keys = torch.randint(-(2**62), 2**62, (options.keys,), device=device, generator=generator)
    stored = torch.randint(-(2**62), 2**62, (options.stored,), device=device, generator=generator).sort().values
    words = torch.randint(0, 2**62, (6, options.keys), device=device, generator=generator)
    order = torch.randperm(options.keys, device=device, generator=generator)
    figures = {
        "argsort (stable)": timed(lambda: torch.argsort(keys, stable=True)),
        "sort (values and indices)": timed(lambda: torch.sort(keys)),
        "searchsorted into the stored": timed(lambda: torch.searchsorted(stored, keys)),
        "gather 6 words": timed(lambda: words[:, order]),
        "nonzero of a mask": timed(lambda: torch.nonzero(keys > 0)),
        "cpu copy of the keys": timed(lambda: keys.cpu()),
    }
    print(f"{options.keys:,} keys, {options.stored:,} stored, {torch.cuda.get_device_name()}")
    for name, seconds in figures.items():
        print(f"  {name}: {seconds * 1e3:.2f} ms ({options.keys / seconds / 1e6:.0f}M keys/s)")


if __name__ == "__main__":
    main()
