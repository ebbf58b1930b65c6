"""cudagraph-pp's graphs, one stage at a time: eager forward against ``CudaGraph`` and ``EmulatedGraph`` replay.

For the first stage (``input_ids`` buffer) and a later stage (persistent intermediate buffer) of
the runtime's seeded pipeline, at each ``--tokens`` size: the microseconds per call of the eager
forward (``GraphManager.run`` with no descriptor), of the FULL and PIECEWISE replays through
``GraphManager(use_cuda_graphs=True)`` (real ``torch.cuda.CUDAGraph`` captures) and of the FULL
replay through ``GraphManager(use_cuda_graphs=False)`` (``EmulatedGraph``: the eager kernels plus
the copy into the graph-owned outputs), each the mean over ``--calls`` calls between two device
synchronisations; and the largest |FULL replay - eager| over the stage's outputs. Without CUDA it
prints the CPU figures (eager, emulated FULL and PIECEWISE) and says so. It prints figures and
asserts nothing about them.
Usage: ``python bench/cudagraph_replay.py [--hidden 512] [--tokens 1,8,64,256] [--calls N]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from lockstep.impl.cudagraph_pp.descriptors import BatchDescriptor
from lockstep.impl.cudagraph_pp.graphs import GraphManager
from lockstep.impl.cudagraph_pp.stages import KEYS, VOCABULARY, Pipeline, Tensors

SEED = 0


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def microseconds_per_call(call: Callable[[], object], calls: int, device: torch.device) -> float:
    for _ in range(3):
        call()
    synchronize(device)
    started = time.perf_counter()
    for _ in range(calls):
        call()
    synchronize(device)
    return (time.perf_counter() - started) / calls * 1e6


def stage_inputs(stage: int, tokens: int, hidden: int, device: torch.device) -> Tensors:
    """The stage's input buffer (``input_ids`` or the persistent intermediate tensors), holding a real batch."""
    generator = torch.Generator().manual_seed(SEED + tokens)
    if stage == 0:
        return {"input_ids": torch.randint(0, VOCABULARY, (tokens,), generator=generator).to(device)}
    return {key: torch.randn(tokens, hidden, generator=generator).to(device) for key in KEYS}


def replayer(pipeline: Pipeline, stage: int, inputs: Tensors, mode: str, cuda_graphs: bool) -> Callable[[], Tensors]:
    """A manager holding one captured descriptor (``mode``, all the buffer's rows); its replay."""
    tokens = next(iter(inputs.values())).shape[0]
    descriptor = BatchDescriptor(mode, tokens, tokens if mode == "FULL" else None)
    manager = GraphManager(stage, pipeline, tokens, use_cuda_graphs=cuda_graphs)
    manager.capture(descriptor, inputs)
    return lambda: manager.run(descriptor, {})


def largest_difference(replayed: Tensors, eager: Tensors) -> float:
    return max(float((replayed[key] - eager[key]).abs().max()) for key in eager)


def measure(pipeline: Pipeline, stage: int, tokens: int, calls: int, cuda: bool) -> list[str]:
    """One table row: stage, tokens, then the figures (see the module doc)."""
    device = pipeline.device
    inputs = stage_inputs(stage, tokens, pipeline.hidden_size, device)
    manager = GraphManager(stage, pipeline, tokens, use_cuda_graphs=False)

    def eager() -> Tensors:
        return manager.run(None, inputs)

    reference = eager()
    emulated_full = replayer(pipeline, stage, inputs, "FULL", cuda_graphs=False)
    if cuda:
        full = replayer(pipeline, stage, inputs, "FULL", cuda_graphs=True)
        piecewise = replayer(pipeline, stage, inputs, "PIECEWISE", cuda_graphs=True)
    else:
        full, piecewise = emulated_full, replayer(pipeline, stage, inputs, "PIECEWISE", cuda_graphs=False)
    difference = largest_difference(full(), reference)
    figures = [microseconds_per_call(call, calls, device) for call in (eager, full, piecewise)]
    if cuda:
        figures.append(microseconds_per_call(emulated_full, calls, device))
    row = [str(stage), str(tokens), *(f"{figure:.1f}" for figure in figures), f"{figures[0] / figures[1]:.2f}x"]
    return [*row, f"{difference:.1e}"]


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(line[column]) for line in [header, *rows]) for column in range(len(header))]
    for line in [header, *rows]:
        print("  ".join(cell.rjust(width) for cell, width in zip(line, widths)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--tokens", default="1,8,64,256", help="comma-separated batch sizes (rows)")
    parser.add_argument("--calls", type=int, default=0, help="calls per figure (0: 300 on CUDA, 30 on CPU)")
    arguments = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    calls = arguments.calls or (300 if cuda else 30)
    sizes = [int(size) for size in arguments.tokens.split(",")]
    if cuda:
        print(f"device: {torch.cuda.get_device_name(device)} (torch {torch.__version__}, CUDA {torch.version.cuda})")
        header = [
            "stage",
            "tokens",
            "eager us",
            "CudaGraph FULL us",
            "CudaGraph PIECEWISE us",
            "EmulatedGraph FULL us",
            "eager/FULL",
            "max |FULL - eager|",
        ]
    else:
        torch.set_num_threads(1)
        print(
            f"CUDA is not available (torch {torch.__version__}): CPU figures only, EmulatedGraph replays "
            "(the eager kernels plus the output copy), one thread"
        )
        header = [
            "stage",
            "tokens",
            "eager us",
            "EmulatedGraph FULL us",
            "EmulatedGraph PIECEWISE us",
            "eager/FULL",
            "max |FULL - eager|",
        ]
    print(f"hidden {arguments.hidden}, {calls} calls per figure, seeded pipeline of 2 stages")
    pipeline = Pipeline(SEED, 2, arguments.hidden, device)
    print_table(header, [measure(pipeline, stage, tokens, calls, cuda) for stage in (0, 1) for tokens in sizes])


if __name__ == "__main__":
    main()
