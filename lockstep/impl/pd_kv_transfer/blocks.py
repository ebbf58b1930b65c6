"""An engine's KV block pool: real block tensors whose contents say whose KV they hold.

Each block is a ``(BLOCK_TOKENS, HIDDEN)`` float tensor on the engine's device (the CPU under
gloo, the rank's GPU under NCCL). Every allocation bumps the block's generation; the KV a request
writes into it (``write``: P's prefill forward, or D's local recompute) is ``contents(request,
generation)``: its first row starts with the request and the generation, and every other value is
derived from them. A freed block is overwritten with ``NOBODY`` as its owner (``_free_blocks``
returning it to the free pool, poisoned). ``holder`` reads a block's tag and checks the rest is
consistent with it, so a reader can tell, from the bytes alone, whether it got its own request's
KV, another request's, or a freed block.
"""

from __future__ import annotations

import torch

from lockstep.models.pd_kv_transfer.state import NOBODY

BLOCK_TOKENS, HIDDEN = 4, 8


def contents(request: int, generation: int, device: torch.device) -> torch.Tensor:
    """The KV of ``request`` written into a block at allocation ``generation`` (``NOBODY``: freed)."""
    values = torch.arange(BLOCK_TOKENS * HIDDEN, dtype=torch.float32, device=device).reshape(BLOCK_TOKENS, HIDDEN)
    values = values / 64.0 + float(1000 * (request + 2) + generation)
    values[0, 0], values[0, 1] = float(request), float(generation)
    return values


class BlockPool:
    """One engine's blocks: owners (``NOBODY``: free), generations and the KV tensors."""

    def __init__(self, blocks: int, device: torch.device) -> None:
        self.device = device
        self.owner = [NOBODY] * blocks
        self.generation = [0] * blocks
        self.kv = torch.stack([contents(NOBODY, 0, device) for _ in range(blocks)])

    def free(self) -> list[int]:
        return [block for block, owner in enumerate(self.owner) if owner == NOBODY]

    def allocate(self, block: int, request: int) -> None:
        if self.owner[block] != NOBODY:
            raise RuntimeError(
                f"block {block} is allocated to request {request} while request {self.owner[block]} owns it"
            )
        self.owner[block] = request
        self.generation[block] += 1

    def write(self, block: int, request: int) -> None:
        """The request's KV into its block (a forward pass, or a recompute)."""
        self.kv[block].copy_(contents(request, self.generation[block], self.device))

    def release(self, request: int) -> list[int]:
        """``_free_blocks``: every block of ``request`` back to the pool, its contents poisoned."""
        freed = [block for block, owner in enumerate(self.owner) if owner == request]
        for block in freed:
            self.owner[block] = NOBODY
            self.kv[block].copy_(contents(NOBODY, self.generation[block], self.device))
        return freed

    def all_free(self) -> bool:
        return all(owner == NOBODY for owner in self.owner)


def holder(tensor: torch.Tensor) -> tuple[int, int]:
    """The (request, generation) whose KV ``tensor`` holds (request ``NOBODY``: a freed block);
    a tensor whose bytes match no tag (torn, or never written) is a ``ValueError``."""
    host = tensor.detach().to("cpu")
    request, generation = int(host[0, 0].item()), int(host[0, 1].item())
    if not torch.equal(host, contents(request, generation, torch.device("cpu"))):
        raise ValueError(
            f"a block whose contents match no request's KV (tag request {request}, generation {generation})"
        )
    return request, generation
