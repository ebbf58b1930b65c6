"""How long Triton takes to compile ``bfs-gpu``'s fused kernels, kernel by kernel.

``python bench/fused_compile.py --ranks 3 [--protocol dp-pause]`` (on a CUDA device): prints how long
building the search took (generating, compiling in parallel processes, loading), then each
kernel's source lines and the seconds of its first launch (compilation, or a load from Triton's
cache when it was compiled before), then the total."""

from __future__ import annotations

import argparse
import time

import torch

from lockstep.checkers.vector.backend import TorchBackend
from lockstep.checkers.vector.search import VectorSearch
from lockstep.models import get_protocol


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--protocol", default="dp-pause")
    parser.add_argument("--ranks", type=int, default=None)
    options = parser.parse_args()
    extra = {} if options.ranks is None else {"ranks": options.ranks}
    instance = get_protocol(options.protocol).instance("post-fix", "seed", {}, **extra)
    started = time.perf_counter()
    search = VectorSearch(instance.machine(), TorchBackend("cuda"), engine="bfs-gpu", kernels="triton")
    fused = search.fused
    if fused is None:
        raise SystemExit("the fused kernels do not apply here (no CUDA or no Triton)")
    print(f"generated, compiled (parallel processes), loaded: {time.perf_counter() - started:.2f} s", flush=True)
    frontier = search._initial_state()
    sources = fused.fused.source.split("@triton.jit")
    total = 0.0
    control = torch.zeros(2 + fused.tuples, dtype=torch.int64, device="cuda")
    enabled = torch.empty(1, dtype=torch.int8, device="cuda")
    out = torch.empty((fused.words, 1024), dtype=torch.int64, device="cuda")
    parent = torch.empty(1024, dtype=torch.int64, device="cuda")
    via = torch.empty(1024, dtype=torch.int64, device="cuda")
    for name, kernel in zip(fused.fused.kernels, fused.kernels):
        lines = next((source.count("\n") for source in sources if f"def {name}(" in source), 0)
        began = time.perf_counter()
        kernel[(1,)](frontier, 1, int(frontier.stride(0)), out, parent, via, control, enabled, fused.tables, 1024, 256)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - began
        total += seconds
        print(f"  {name}: {lines} lines, {seconds:.2f} s", flush=True)
    print(f"{len(fused.kernels)} kernels, {total:.1f} s in first launches", flush=True)


if __name__ == "__main__":
    main()
