"""The tiny seeded model split into pipeline stages: real forward compute on the rank's device.

Stage 0 embeds token ids; every stage runs ``layers`` dense layers (``tanh(x @ W)``) over all
scheduled tokens of the step; the last stage projects each row's last token to the vocabulary
and samples greedily (argmax), giving the sampled ids as ``[rows, 1]`` int32, the shape vLLM
broadcasts. Weights come from a generator seeded with the run's seed and the stage, so every run
of a seed computes the same tokens. The sizes (``hidden``, ``layers``, tokens per chunk) make the
forward dominate a step's cost.
"""

from __future__ import annotations

import torch

from lockstep.impl.pp_broadcast.scenario import VOCABULARY


class Stage:
    """One pipeline stage's weights and kernels."""

    def __init__(self, rank: int, size: int, hidden: int, layers: int, seed: int, device: torch.device) -> None:
        generator = torch.Generator().manual_seed(seed * 1009 + rank)
        scale = hidden**-0.5

        def weights(*shape: int) -> torch.Tensor:
            weight: torch.Tensor = (torch.randn(*shape, generator=generator) * scale).to(device)
            return weight

        self.hidden, self.device = hidden, device
        self.embedding = weights(VOCABULARY, hidden) if rank == 0 else None
        self.layers = [weights(hidden, hidden) for _ in range(layers)]
        self.head = weights(hidden, VOCABULARY) if rank == size - 1 else None

    def embed(self, token_ids: list[int]) -> torch.Tensor:
        assert self.embedding is not None
        return self.embedding[torch.tensor(token_ids, dtype=torch.long, device=self.device)]

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        for weight in self.layers:
            hidden_states = torch.tanh(hidden_states @ weight)
        return hidden_states

    def sample(self, hidden_states: torch.Tensor, last_positions: list[int]) -> torch.Tensor:
        """Greedy ids of each row's last token, ``[rows, 1]`` int32."""
        assert self.head is not None
        index = torch.tensor(last_positions, dtype=torch.long, device=self.device)
        logits = hidden_states[index] @ self.head
        return logits.argmax(dim=-1, keepdim=True).to(torch.int32)
