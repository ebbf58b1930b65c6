"""A tiny seeded model split into pipeline stages, and its eager reference.

Every stage works row by row (one row per token), as a transformer's MLP and norms do; the first
stage embeds ``input_ids``; every stage returns ``IntermediateTensors``-like dicts with the keys
``hidden_states`` and ``residual`` (vLLM's usual pair). A stage is two **pieces** with an eager
op between them, as vLLM's piecewise compilation splits a layer at attention: piece one reads
the stage's inputs (for a non-first stage, the intermediate tensors: what a PIECEWISE graph
records the address of), the eager op scales each row, piece two writes the outputs.
A bias keeps a stage from mapping zeros (what capture leaves in a buffer) to zeros, so data
computed from stale inputs never looks like a received step's data downstream.

The weights of every stage come from one generator seeded with the run's seed, so every rank can
build the whole pipeline and compute the **eager reference** of any step: the outputs of every
stage, run eagerly in one process on the step's input ids. The runtime compares each step's
outputs (graph replays, copies and p2p included) with it.
"""

from __future__ import annotations

import torch

KEYS = ("hidden_states", "residual")
VOCABULARY = 1024

Tensors = dict[str, torch.Tensor]


class Pipeline:
    """The weights of every stage (seeded), on one device."""

    def __init__(self, seed: int, stages: int, hidden_size: int, device: torch.device) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.stages, self.hidden_size, self.device = stages, hidden_size, device
        scale = hidden_size**-0.5
        self.embedding = torch.randn(VOCABULARY, hidden_size, generator=generator).to(device)
        self.first = [
            (torch.randn(hidden_size, hidden_size, generator=generator) * scale).to(device) for _ in range(stages)
        ]
        self.second = [
            (torch.randn(hidden_size, hidden_size, generator=generator) * scale).to(device) for _ in range(stages)
        ]
        self.row_scale = [
            (1.0 + 0.1 * torch.rand(1, hidden_size, generator=generator)).to(device) for _ in range(stages)
        ]
        self.bias = [(0.5 + torch.rand(1, hidden_size, generator=generator)).to(device) for _ in range(stages)]

    # -------------------------------------------------------------------------------- pieces
    def piece_one(self, stage: int, inputs: Tensors) -> Tensors:
        """The stage's first piece: embed (first stage) or add the residual; the first matmul."""
        if stage == 0:
            residual = self.embedding[inputs["input_ids"]]
        else:
            residual = inputs["hidden_states"] + inputs["residual"] + self.bias[stage]
        return {"residual": residual, "mixed": residual @ self.first[stage]}

    def between(self, stage: int, middle: Tensors) -> Tensors:
        """The eager op between the pieces (where attention runs outside piecewise graphs)."""
        return {"residual": middle["residual"], "mixed": middle["mixed"] * self.row_scale[stage]}

    def piece_two(self, stage: int, middle: Tensors) -> Tensors:
        """The stage's second piece: the output hidden states and the residual."""
        return {
            "hidden_states": torch.tanh(middle["mixed"] + self.bias[stage]) @ self.second[stage],
            "residual": middle["residual"].clone(),
        }

    def forward(self, stage: int, inputs: Tensors) -> Tensors:
        """The stage, eagerly: fresh output tensors."""
        return self.piece_two(stage, self.between(stage, self.piece_one(stage, inputs)))

    # ----------------------------------------------------------------------------- reference
    def reference(self, input_ids: torch.Tensor) -> list[Tensors]:
        """Every stage's outputs for ``input_ids``, run eagerly one after the other."""
        outputs: list[Tensors] = []
        inputs: Tensors = {"input_ids": input_ids.to(self.device)}
        for stage in range(self.stages):
            inputs = self.forward(stage, inputs)
            outputs.append(inputs)
        return outputs


def step_input_ids(seed: int, step: int, tokens: int) -> torch.Tensor:
    """The token ids of step ``step``'s batch (the same on every rank)."""
    generator = torch.Generator().manual_seed(seed * 1009 + step + 1)
    return torch.randint(0, VOCABULARY, (tokens,), generator=generator)
