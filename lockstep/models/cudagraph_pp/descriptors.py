"""What vLLM decides in Python before any graph runs: descriptors, capture order, dispatch.

Mirrors vLLM v0.19.0 ``vllm/v1/worker/gpu/cudagraph_utils.py`` (``BatchExecutionDescriptor``,
``_is_compatible``, ``CudaGraphManager._init_candidates`` and ``dispatch``) and
``vllm/config/compilation.py`` (``CUDAGraphMode``'s decode/mixed modes,
``adjust_cudagraph_sizes_for_spec_decode``) on plain integers: the model (``model.py``) turns the
results into constant tables. ``adjusted_num_reqs`` is PR #35162's proposed num_reqs adjustment,
written once in the IR for the ``full-adjustment`` mutant and for the lemma (``lemmas.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lockstep.spec.terms import DefinitionError, Term, TermLike, conjunction, if_then_else, lift

# CompilationConfig.cudagraph_mode, as (decode mode, mixed mode, separate decode routine).
CUDAGRAPH_MODES = {
    "FULL": ("FULL", "FULL", False),
    "FULL_AND_PIECEWISE": ("FULL", "PIECEWISE", True),
    "PIECEWISE": ("PIECEWISE", "PIECEWISE", False),
    "FULL_DECODE_ONLY": ("FULL", "NONE", True),
}
MODE_NAMES = tuple(CUDAGRAPH_MODES)


@dataclass(frozen=True)
class Descriptor:
    """BatchExecutionDescriptor: graph mode, padded tokens, padded requests (None: PIECEWISE)."""

    mode: str
    num_tokens: int
    num_reqs: int | None
    uniform_token_count: int | None = None

    @property
    def label(self) -> str:
        if self.mode == "PIECEWISE":
            return f"PIECEWISE({self.num_tokens})"
        uniform = "" if self.uniform_token_count is None else f",u{self.uniform_token_count}"
        return f"FULL({self.num_tokens},{self.num_reqs}{uniform})"


def capture_sizes(largest: int, multiple_of: int = 1) -> tuple[int, ...]:
    """cudagraph_capture_sizes: 1, 2, 4, ... below the largest, and the largest; then, as
    CompilationConfig.adjust_cudagraph_sizes_for_spec_decode does, rounded up to multiples of
    ``multiple_of`` (decode_query_len) that do not exceed the largest."""
    sizes = {largest}
    size = 1
    while size < largest:
        sizes.add(size)
        size *= 2
    if multiple_of > 1:
        rounded = {-(-size // multiple_of) * multiple_of for size in sizes}
        sizes = {size for size in rounded if size <= largest} or ({multiple_of} if multiple_of <= largest else set())
        if not sizes:
            raise DefinitionError(
                f"no capture size is a multiple of decode_query_len {multiple_of} and at most {largest}"
            )
    return tuple(sorted(sizes))


def capture_plan(
    mode_name: str, sizes: tuple[int, ...], max_num_reqs: int, decode_query_len: int
) -> tuple[dict[int, list[Descriptor]], list[Descriptor]]:
    """CudaGraphManager._init_candidates: candidates per capture size, and the capture order."""
    decode_mode, mixed_mode, separate = CUDAGRAPH_MODES[mode_name]
    by_size: dict[int, list[Descriptor]] = {}
    by_mode: dict[str, list[Descriptor]] = {}
    for size in sorted(sizes):
        found: list[Descriptor] = []
        if separate and decode_mode != "NONE" and decode_query_len <= size <= max_num_reqs * decode_query_len:
            found.append(Descriptor(decode_mode, size, size // decode_query_len, decode_query_len))
        if mixed_mode != "NONE":
            found.append(Descriptor(mixed_mode, size, min(size, max_num_reqs) if mixed_mode == "FULL" else None))
        for descriptor in found:
            by_mode.setdefault(descriptor.mode, []).append(descriptor)
        if found:
            by_size[size] = found
    order = [
        descriptor
        for graph_mode in ("PIECEWISE", "FULL")
        for descriptor in sorted(by_mode.get(graph_mode, []), key=lambda d: d.num_tokens, reverse=True)
    ]
    return by_size, order


def is_compatible(descriptor: Descriptor, num_reqs: int, num_tokens: int, uniform: int | None) -> bool:
    """_is_compatible: enough tokens, enough requests (if padded), the same uniform count."""
    return (
        (descriptor.uniform_token_count is None or descriptor.uniform_token_count == uniform)
        and (descriptor.num_reqs is None or descriptor.num_reqs >= num_reqs)
        and descriptor.num_tokens >= num_tokens
    )


def dispatch_plan(
    by_size: Mapping[int, list[Descriptor]], max_num_tokens: int, max_num_reqs: int, decode_query_len: int
) -> dict[tuple[int, int, bool], Descriptor]:
    """CudaGraphManager.dispatch for every batch (tokens, requests, uniform decode); absent: NONE."""
    table: dict[tuple[int, int, bool], Descriptor] = {}
    sizes = sorted(by_size)
    for tokens in range(1, max_num_tokens + 1):
        bucket = next((size for size in sizes if size >= tokens), None)
        for requests in range(1, min(tokens, max_num_reqs) + 1):
            for decode in (False, True):
                if decode and tokens != requests * decode_query_len:
                    continue
                uniform = decode_query_len if decode else None
                chosen = (
                    next((d for d in by_size.get(bucket, []) if is_compatible(d, requests, tokens, uniform)), None)
                    if bucket is not None
                    else None
                )
                if chosen is not None:
                    table[(tokens, requests, decode)] = chosen
    return table


def adjusted_num_reqs(num_reqs: TermLike, num_tokens: TermLike) -> Term:
    """PR #35162's proposed num_reqs adjustment (description, "Question"; not in v0.19.0): if the
    tokens do not divide evenly, take ceil(tokens / reqs) tokens per request, then tokens // that
    many requests, and 1 if that still does not divide. Shared by the model and its lemma."""
    requests, tokens = lift(num_reqs), lift(num_tokens)
    per_request = (tokens + requests - 1) // requests
    fewer = tokens // per_request
    applies = conjunction(requests > 0, tokens > requests, tokens % requests != 0)
    return if_then_else(applies, if_then_else(tokens % fewer != 0, 1, fewer), requests)
