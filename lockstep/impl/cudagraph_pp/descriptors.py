"""The runtime's descriptor plan and dispatch, written from vLLM v0.19.0 (not shared with the model).

``vllm/v1/worker/gpu/cudagraph_utils.py``: ``BatchExecutionDescriptor`` (graph mode, padded tokens,
padded requests or None for PIECEWISE, uniform token count), ``CudaGraphManager._init_candidates``
(per capture size: the uniform-decode descriptor when the mode has a separate decode routine, then
the mixed one), the capture order (PIECEWISE then FULL, each by ``num_tokens`` descending) and
``dispatch`` (the smallest capture size that fits the tokens, its first compatible candidate, else
eager); ``vllm/config/compilation.py``: the capture sizes (1, 2, 4, ... and the largest, rounded
up to multiples of ``decode_query_len`` by ``adjust_cudagraph_sizes_for_spec_decode``) and the
modes of ``cudagraph_mode``. The model computes the same plan in ``lockstep.models.cudagraph_pp
.descriptors``; this copy is the runtime's own, so a difference shows up as a divergence in replay.
Labels are the model's descriptor names (``FULL(3,2)``, ``PIECEWISE(2)``, ``FULL(2,2,u1)``).
"""

from __future__ import annotations

from dataclasses import dataclass

# cudagraph_mode: (decode mode, mixed mode, separate decode routine), by the model's number.
MODES = {
    0: ("FULL", "FULL", False),
    1: ("FULL", "PIECEWISE", True),
    2: ("PIECEWISE", "PIECEWISE", False),
    3: ("FULL", "NONE", True),
}
MODE_NAMES = {0: "FULL", 1: "FULL_AND_PIECEWISE", 2: "PIECEWISE", 3: "FULL_DECODE_ONLY"}
EAGER = "NONE"


@dataclass(frozen=True)
class BatchDescriptor:
    """BatchExecutionDescriptor."""

    mode: str  # FULL or PIECEWISE
    num_tokens: int
    num_reqs: int | None
    uniform_token_count: int | None = None

    @property
    def label(self) -> str:
        if self.mode == "PIECEWISE":
            return f"PIECEWISE({self.num_tokens})"
        uniform = "" if self.uniform_token_count is None else f",u{self.uniform_token_count}"
        return f"FULL({self.num_tokens},{self.num_reqs}{uniform})"

    def capture_requests(self, max_num_reqs: int) -> int:
        """``desc.num_reqs or min(num_tokens, max_num_reqs)``: the dummy batch's request count."""
        return self.num_reqs or min(self.num_tokens, max_num_reqs)


def capture_sizes(largest: int, decode_query_len: int) -> list[int]:
    sizes, size = {largest}, 1
    while size < largest:
        sizes.add(size)
        size *= 2
    if decode_query_len > 1:
        rounded = {-(-size // decode_query_len) * decode_query_len for size in sizes}
        sizes = {size for size in rounded if size <= largest}
        if not sizes and decode_query_len <= largest:
            sizes = {decode_query_len}
    if not sizes:
        raise ValueError(f"no capture size is a multiple of decode_query_len {decode_query_len} and at most {largest}")
    return sorted(sizes)


@dataclass
class DescriptorPlan:
    """The candidates per capture size, the capture order, and dispatch."""

    max_num_reqs: int
    decode_query_len: int
    candidates: dict[int, list[BatchDescriptor]]
    order: list[BatchDescriptor]

    @classmethod
    def build(
        cls, cudagraph_mode: int, largest: int, max_num_tokens: int, max_num_reqs: int, decode_query_len: int
    ) -> DescriptorPlan:
        decode_mode, mixed_mode, separate = MODES[cudagraph_mode]
        candidates: dict[int, list[BatchDescriptor]] = {}
        for size in capture_sizes(min(largest, max_num_tokens), decode_query_len):
            found = []
            if separate and decode_query_len <= size <= max_num_reqs * decode_query_len:
                found.append(BatchDescriptor(decode_mode, size, size // decode_query_len, decode_query_len))
            if mixed_mode != EAGER:
                found.append(
                    BatchDescriptor(mixed_mode, size, min(size, max_num_reqs) if mixed_mode == "FULL" else None)
                )
            if found:
                candidates[size] = found
        order = [
            descriptor
            for mode in ("PIECEWISE", "FULL")
            for descriptor in sorted(
                (d for found in candidates.values() for d in found if d.mode == mode),
                key=lambda d: d.num_tokens,
                reverse=True,
            )
        ]
        return cls(max_num_reqs, decode_query_len, candidates, order)

    def dispatch(self, num_tokens: int, num_reqs: int, uniform_decode: bool) -> BatchDescriptor | None:
        """CudaGraphManager.dispatch: None means eager (CUDAGraphMode.NONE)."""
        bucket = next((size for size in sorted(self.candidates) if size >= num_tokens), None)
        if bucket is None:
            return None
        uniform = self.decode_query_len if uniform_decode else None
        for descriptor in self.candidates[bucket]:
            if (
                (descriptor.uniform_token_count is None or descriptor.uniform_token_count == uniform)
                and (descriptor.num_reqs is None or descriptor.num_reqs >= num_reqs)
                and descriptor.num_tokens >= num_tokens
            ):
                return descriptor
        return None
