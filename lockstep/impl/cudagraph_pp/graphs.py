"""Graphs and the graph manager of one stage: ``EmulatedGraph`` (CPU), ``CudaGraph`` (CUDA), ``GraphManager``.

A CUDA graph records the kernels of a forward together with the **addresses** they read and
write; ``replay`` runs the kernels again on whatever data is at those addresses then, whatever
tensors the caller holds. ``EmulatedGraph`` emulates exactly that on CPU: at capture it keeps
the function and the input tensor **objects** (views of the captured buffers: their storage, not
a copy) and runs the function once into graph-owned outputs; ``replay`` runs the function again
on the data those recorded tensors hold at replay time and writes the results into the same
output tensors. So a runtime that hands a graph a fresh receive tensor instead of copying into
the captured buffer reads stale data on replay, as on a GPU: address stability (A1) and the
copy-in (A2) are checked on real data. Under CUDA (``--backend nccl``) ``CudaGraph`` is a real
``torch.cuda.CUDAGraph`` with the same interface (warm-up on a side stream, capture, replay).

``GraphManager`` mirrors vLLM v0.19.0's ``ModelCudaGraphManager`` for one stage: ``capture``
(warm-up in mode NONE, which allocates the manager's output buffers by ``empty_like`` on its
first call; then FULL: one graph of the whole stage plus the copy of its outputs into the
manager's buffers ``[:num_tokens]``; PIECEWISE: one graph per piece, the eager op between them
working in place on the first piece's graph-owned output, as attention writes into a buffer the
piece owns), and ``run`` (``run_fullgraph``, the piecewise replays, or the eager forward).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from lockstep.impl.cudagraph_pp.descriptors import BatchDescriptor
from lockstep.impl.cudagraph_pp.stages import Pipeline, Tensors

Function = Callable[[Tensors], Tensors]


class EmulatedGraph:
    """CUDA graph address capture emulated on CPU (see the module doc)."""

    def __init__(self, function: Function, inputs: Tensors) -> None:
        self.function = function
        self.inputs = dict(inputs)  # the recorded tensors themselves: replay reads what they hold then
        self.input_pointers = {key: tensor.data_ptr() for key, tensor in self.inputs.items()}
        self.outputs = function(self.inputs)  # graph-owned output memory

    def replay(self) -> Tensors:
        produced = self.function(self.inputs)
        for key, tensor in produced.items():
            if tensor.data_ptr() != self.outputs[key].data_ptr():
                self.outputs[key].copy_(tensor)
        return self.outputs


class CudaGraph:
    """A real ``torch.cuda.CUDAGraph`` around ``function`` on the recorded ``inputs``."""

    def __init__(self, function: Function, inputs: Tensors) -> None:
        self.inputs = dict(inputs)
        self.input_pointers = {key: tensor.data_ptr() for key, tensor in self.inputs.items()}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            function(self.inputs)  # warm-up outside the capture
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = function(self.inputs)

    def replay(self) -> Tensors:
        self.graph.replay()
        return self.outputs


Graph = EmulatedGraph | CudaGraph


@dataclass
class Captured:
    """The graphs of one descriptor: one (FULL) or one per piece (PIECEWISE), and its dummy batch."""

    descriptor: BatchDescriptor
    graphs: list[Graph]
    requests: int

    @property
    def inputs(self) -> Tensors:
        """What the replay reads as the stage's inputs (the first graph's recorded tensors)."""
        return self.graphs[0].inputs


@dataclass
class GraphManager:
    """ModelCudaGraphManager of one stage (see the module doc)."""

    stage: int
    pipeline: Pipeline
    max_num_reqs: int
    use_cuda_graphs: bool
    captured: dict[str, Captured] = field(default_factory=dict)
    output: Tensors | None = None  # the manager's output buffers (FULL), allocated at the first warm-up

    def _graph(self, function: Function, inputs: Tensors) -> Graph:
        return CudaGraph(function, inputs) if self.use_cuda_graphs else EmulatedGraph(function, inputs)

    def capture(self, descriptor: BatchDescriptor, inputs: Tensors) -> Captured:
        """Warm up (mode NONE) and capture ``descriptor`` on ``inputs`` (slices of the capture buffers)."""
        stage, pipeline = self.stage, self.pipeline
        warm = pipeline.forward(stage, inputs)
        if self.output is None:  # IntermediateTensors.empty_like on the first warm-up run
            self.output = {key: torch.empty_like(tensor) for key, tensor in warm.items()}
        rows = descriptor.num_tokens
        if descriptor.mode == "FULL":
            output = self.output

            def full(given: Tensors) -> Tensors:
                produced = pipeline.forward(stage, given)
                for key, tensor in produced.items():
                    output[key][:rows].copy_(tensor)
                return {key: output[key][:rows] for key in produced}

            graphs = [self._graph(full, inputs)]
        else:
            first = self._graph(lambda given: pipeline.piece_one(stage, given), inputs)
            self._between(first.outputs)
            second = self._graph(lambda middle: pipeline.piece_two(stage, middle), first.outputs)
            graphs = [first, second]
        found = Captured(descriptor, graphs, descriptor.capture_requests(self.max_num_reqs))
        self.captured[descriptor.label] = found
        return found

    def _between(self, middle: Tensors) -> None:
        """The eager op between the pieces, in place on the first piece's graph-owned output."""
        middle["mixed"].mul_(self.pipeline.row_scale[self.stage])

    def reads(self, descriptor: BatchDescriptor | None, given: Tensors) -> Tensors:
        """The tensors this forward will read as the stage's inputs: a graph's recorded ones, or ``given``."""
        return given if descriptor is None else self.captured[descriptor.label].inputs

    def run(self, descriptor: BatchDescriptor | None, given: Tensors) -> Tensors:
        """FULL: run_fullgraph (replay; the manager's buffers [:num_tokens]); PIECEWISE: replay each
        piece (the given tensors are not looked at, as a CUDA graph does not); NONE: eager."""
        if descriptor is None:
            return self.pipeline.forward(self.stage, given)
        graphs = self.captured[descriptor.label].graphs
        if descriptor.mode == "FULL":
            return graphs[0].replay()
        middle = graphs[0].replay()
        self._between(middle)
        return graphs[1].replay()
