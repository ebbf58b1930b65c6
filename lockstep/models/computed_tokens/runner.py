"""The worker side of computed-tokens: each rank's V2 model runner.

Mirrors ``vllm/v1/worker/gpu/model_runner.py``: ``execute_model`` (``add_requests``,
``update_requests``, ``prepare_inputs`` with ``seq_lens_cpu_upper_bound`` and
``is_prefilling``; ``model_states/default.py`` ``prepare_attn`` for ``max_seq_len``),
``sample_tokens`` and ``postprocess`` (``input_batch.py``: ``get_num_sampled_and_rejected``,
``post_update``), and ``pp_utils.py`` (``pp_broadcast``/``pp_receive`` of num_sampled and
num_rejected to the non-last PP ranks); ``states.py`` (``RequestState.add_request``,
``is_prefilling``).

The variant picks where the CPU mirror moves: ``pre-fix`` (v0.21.0) advances
``num_computed_tokens_np`` and ``num_computed_prefill_tokens`` by ``num_scheduled`` in
``postprocess``; ``post-fix`` (v0.22.0) overwrites the mirror with the scheduler's value in
``update_requests`` and sets ``num_computed_prefill_tokens = min(mirror, prefill_len)`` there.

Faithfulness note:
- Each rank runs ``execute_model(N)``, ``sample_tokens(N)``, ``execute_model(N+1)`` in order,
  and the GPU value a step's kernels read is the one after the previous step's ``post_update``
  (stream order); ``pp_receive``'s broadcast is waited before the non-last rank's postprocess.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lockstep.models.computed_tokens.scheduler import retire
from lockstep.models.computed_tokens.state import POST_FIX, PRE_FIX, State
from lockstep.spec.actions import action
from lockstep.spec.machine import Machine, Step
from lockstep.spec.sorts import MapSort, Sort
from lockstep.spec.terms import (
    Term,
    TermLike,
    conjunction,
    if_then_else,
    lift,
    map_of,
    max_of,
    minimum,
)


@dataclass(frozen=True)
class _Requests:
    """One rank's RequestState after add_requests and update_requests: a map Request -> value each."""

    added: Term
    prefill_len: Term
    gpu: Term
    mirror: Term
    prefill_tokens: Term


@action(actor="rank:{rank}")
def execute_model(state: State, variant: str, rank: Term) -> Step:
    """add_requests, update_requests, prepare_inputs: the step's attention metadata."""
    position = state.sampled[rank]
    record = state.batch[position]
    previous = if_then_else(rank == 0, rank, rank - 1)
    # PP: a stage runs step N after the stage before it ran N (it receives its hidden states).
    upstream_ran = (rank == 0) | (state.sampled[previous] + if_then_else(state.executed[previous], 1, 0) > position)
    requests = _update_requests(state, variant, rank, record)
    return Step(
        conjunction(~state.executed[rank], position < state.batch.length(), upstream_ran),
        {
            state.executed: state.executed.set(rank, True),
            state.added: state.added.set(rank, requests.added),
            state.prefill_len: state.prefill_len.set(rank, requests.prefill_len),
            state.gpu: state.gpu.set(rank, requests.gpu),
            state.mirror: state.mirror.set(rank, requests.mirror),
            state.prefill_tokens: state.prefill_tokens.set(rank, requests.prefill_tokens),
            **_prepare_inputs(state, rank, record, requests),
        },
    )


def _update_requests(state: State, variant: str, rank: Term, record: Term) -> _Requests:
    """add_requests (a request new to the rank) and update_requests (every scheduled request)."""

    def scheduled(request: Term) -> Term:
        return record[request].field("scheduled") > 0

    def new(request: Term) -> Term:
        return scheduled(request) & record[request].field("new")

    def sent(request: Term) -> Term:  # the scheduler's num_computed_tokens before this step
        return record[request].field("computed")

    added = _per_request(state, state.added, lambda q: state.added[rank][q] | new(q))
    prefill_len = _per_request(
        state, state.prefill_len, lambda q: if_then_else(new(q), state.sizes.prefill_len, state.prefill_len[rank][q])
    )
    gpu = _per_request(state, state.gpu, lambda q: if_then_else(new(q), sent(q), state.gpu[rank][q]))
    if variant == POST_FIX:  # update_requests: refresh from the scheduler, then min(mirror, prefill_len) everywhere
        mirror = _per_request(state, state.mirror, lambda q: if_then_else(scheduled(q), sent(q), state.mirror[rank][q]))
        prefill_tokens = _per_request(state, state.prefill_tokens, lambda q: minimum(mirror[q], prefill_len[q]))
    else:  # add_requests sets both from the scheduler; update_requests only appends blocks
        mirror = _per_request(state, state.mirror, lambda q: if_then_else(new(q), sent(q), state.mirror[rank][q]))
        prefill_tokens = _per_request(
            state, state.prefill_tokens, lambda q: if_then_else(new(q), sent(q), state.prefill_tokens[rank][q])
        )
    return _Requests(added, prefill_len, gpu, mirror, prefill_tokens)


def _prepare_inputs(state: State, rank: Term, record: Term, requests: _Requests) -> dict[Term, TermLike]:
    """prepare_inputs and prepare_attn: the attention metadata the rank builds for the step."""
    count, mirror, gpu = state.sizes.requests, requests.mirror, requests.gpu
    prefill_tokens, prefill_len = requests.prefill_tokens, requests.prefill_len

    def row(request: Term) -> Term:
        return record[request]

    def scheduled(request: Term) -> Term:
        return row(request).field("scheduled") > 0

    def bound(value: Term) -> Callable[[Term], Term]:  # per row: value[q] + num_scheduled, 0 if q is not scheduled
        return lambda r: if_then_else(
            r < count,
            _request_of(state, r, lambda q: if_then_else(scheduled(q), value[q] + row(q).field("scheduled"), 0)),
            0,
        )

    upper = _per_row(state, state.upper, bound(mirror))  # seq_lens_cpu_upper_bound
    seq_len = _per_row(state, state.seq_len, bound(gpu))
    real = _per_row(state, state.real, lambda r: (r < count) & _request_of(state, r, scheduled))
    return {
        state.built: state.built.set(rank, True),
        state.real: state.real.set(rank, real),
        state.upper: state.upper.set(rank, upper),
        state.seq_len: state.seq_len.set(rank, seq_len),
        # FULL graphs: max over [:num_reqs_padded] (padded rows are 0); otherwise over real rows.
        state.max_seq_len: state.max_seq_len.set(rank, max_of(state.Row, lambda r: upper[r])),
        state.prefilling: state.prefilling.set(
            rank, _per_request(state, state.prefilling, lambda q: prefill_tokens[q] < prefill_len[q])
        ),
        state.allowed: state.allowed.set(rank, _per_request(state, state.allowed, lambda q: row(q).field("allowed"))),
        state.alone: state.alone.set(rank, _per_request(state, state.alone, lambda q: row(q).field("alone"))),
        state.sent: state.sent.set(rank, _per_request(state, state.sent, lambda q: row(q).field("computed"))),
        state.seen_mirror: state.seen_mirror.set(rank, mirror),
        state.seen_gpu: state.seen_gpu.set(rank, gpu),
        state.seen_prefill_tokens: state.seen_prefill_tokens.set(rank, prefill_tokens),
        state.seen_prefill_len: state.seen_prefill_len.set(rank, prefill_len),
    }


def _sample_last(state: State, variant: str, accepted: list[Term]) -> Step:
    """The last rank's sample_tokens, ``accepted[q]`` drafts accepted for request q."""
    sizes = state.sizes
    last, count = sizes.last, sizes.requests
    position = state.sampled[last]
    record = state.batch[position]

    def choice(q: Term) -> Term:
        chosen = accepted[-1]
        for index in range(count - 2, -1, -1):
            chosen = if_then_else(q == index, accepted[index], chosen)
        return chosen

    def num_sampled(q: Term) -> Term:
        chunk = state.gpu[last][q] + record[q].field("scheduled") < state.prefill_len[last][q]  # still prefilling
        return if_then_else((record[q].field("scheduled") > 0) & ~chunk, choice(q) + 1, 0)

    sampled = map_of(state.Request, num_sampled, state.Result.value)
    counted = state.sampled.set(last, position + 1)
    updates = postprocess(state, variant, lift(last, state.Rank), record, sampled)
    updates[state.executed] = state.executed.set(last, False)
    updates.update(retire(state, state.processed, counted, state.results.append(sampled)))
    valid = conjunction(
        *[
            accepted[q] <= if_then_else(record[q].field("scheduled") > 0, record[q].field("drafts"), 0)
            for q in range(count)
        ]
    )
    return Step(conjunction(state.executed[last], valid), updates)


@action(actor="rank:{last}")  # build names the last rank
def sample_tokens(state: State, variant: str, **accepted: Term) -> Step:
    """The last rank samples: rejection sampling accepts ``accepted[q]`` of q's drafts;
    pp_broadcast sends (num_sampled, num_rejected) to the other ranks; the output goes to the engine."""
    return _sample_last(state, variant, list(accepted.values()))


def add_sample_tokens(machine: Machine, state: State, variant: str) -> None:
    """Bind ``sample_tokens`` as an action of the last rank with one parameter per request, the
    drafts the rejection sampler accepts for it: ``accepted`` with one request, ``accepted_0`` ...
    with more."""
    count = state.sizes.requests
    names = ["accepted"] if count == 1 else [f"accepted_{q}" for q in range(count)]
    machine.add(
        sample_tokens, state, variant, actor=f"rank:{state.sizes.last}", sorts={name: state.Drafts for name in names}
    )


@action(actor="rank:{rank}")
def pp_receive(state: State, variant: str, rank: Term) -> Step:
    """A non-last rank's sample_tokens: pp_receive the last rank's counts, then postprocess."""
    position = state.sampled[rank]
    counted = state.sampled.set(rank, position + 1)
    updates = postprocess(state, variant, rank, state.batch[position], state.results[position])
    updates[state.executed] = state.executed.set(rank, False)
    updates.update(retire(state, state.processed, counted))
    return Step(conjunction(rank != state.sizes.last, state.executed[rank], position < state.results.length()), updates)


def postprocess(state: State, variant: str, rank: Term, record: Term, sampled: Term) -> dict[Term, TermLike]:
    """post_update on the GPU (num_computed += query_len - num_rejected); pre-fix also the CPU mirror."""

    def rejected(q: Term) -> Term:
        drafts = record[q].field("drafts")
        return if_then_else((drafts > 0) & (sampled[q] > 0), drafts - (sampled[q] - 1), 0)

    updates: dict[Term, TermLike] = {
        state.gpu: state.gpu.set(
            rank,
            _per_request(state, state.gpu, lambda q: state.gpu[rank][q] + record[q].field("scheduled") - rejected(q)),
        ),
    }
    if variant == PRE_FIX:  # "Advance the CPU mirror optimistically (assume all scheduled accepted)."
        updates[state.mirror] = state.mirror.set(
            rank, _per_request(state, state.mirror, lambda q: state.mirror[rank][q] + record[q].field("scheduled"))
        )
        updates[state.prefill_tokens] = state.prefill_tokens.set(
            rank,
            _per_request(
                state,
                state.prefill_tokens,
                lambda q: minimum(
                    state.prefill_tokens[rank][q] + record[q].field("scheduled"), state.prefill_len[rank][q]
                ),
            ),
        )
    return updates


# ----------------------------------------------------------------------------------------- helpers
def _cell_sort(variable: Term) -> Sort:
    """The value sort of a variable Rank -> (Request or Row) -> value."""
    sort = variable.sort
    assert isinstance(sort, MapSort) and isinstance(sort.value, MapSort)
    return sort.value.value


def _per_request(state: State, like: Term, body: Callable[[Term], TermLike]) -> Term:
    """One rank's map Request -> ``body(request)``, of the value sort of ``like``."""
    return map_of(state.Request, body, _cell_sort(like))


def _per_row(state: State, like: Term, body: Callable[[Term], TermLike]) -> Term:
    """One rank's map Row -> ``body(row)``, of the value sort of ``like``."""
    return map_of(state.Row, body, _cell_sort(like))


def _request_of(state: State, row: Term, body: Callable[[Term], Term]) -> Term:
    """``body(request)`` for the request a real row stands for (rows 0..requests-1)."""
    count = state.sizes.requests
    value = body(lift(count - 1, state.Request))
    for index in range(count - 2, -1, -1):
        value = if_then_else(row == index, body(lift(index, state.Request)), value)
    return value
