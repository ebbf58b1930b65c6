"""The worker side of computed-tokens: each rank's V2 model runner.

Mirrors ``vllm/v1/worker/gpu/model_runner.py``: ``execute_model`` (``add_requests``,
``update_requests``, ``prepare_inputs`` with ``seq_lens_cpu_upper_bound`` and
``is_prefilling``; ``model_states/default.py`` ``prepare_attn`` for ``max_seq_len``),
``sample_tokens`` and ``postprocess`` (``input_batch.py``: ``get_num_sampled_and_rejected``,
``post_update``), and ``pp_utils.py`` (``pp_broadcast``/``pp_receive`` of num_sampled and
num_rejected to the non-last PP ranks); ``states.py`` (``RequestState.add_request``,
``is_prefilling``).

``variant`` picks where the CPU mirror moves: ``pre-fix`` (v0.21.0) advances
``num_computed_tokens_np`` and ``num_computed_prefill_tokens`` by ``num_scheduled`` in
``postprocess``; ``post-fix`` (v0.22.0) overwrites the mirror with the scheduler's value in
``update_requests`` and sets ``num_computed_prefill_tokens = min(mirror, prefill_len)`` there.
"""

from __future__ import annotations

import inspect

from lockstep.models.computed_tokens.scheduler import retire
from lockstep.models.computed_tokens.state import State
from lockstep.spec.machine import Machine, Step
from lockstep.spec.sorts import MapSort
from lockstep.spec.terms import Term, conjunction, if_then_else, lift, map_of, max_of, minimum


def add_runner_actions(machine: Machine, state: State, fixed: bool) -> None:
    sizes = state.sizes
    Request, Rank, Row = state.Request, state.Rank, state.Row
    count = sizes.requests

    def per_request(like: Term, body: object) -> Term:
        assert isinstance(like.sort, MapSort) and isinstance(like.sort.value, MapSort)
        return map_of(Request, body, like.sort.value.value)  # type: ignore[arg-type]

    def per_row(like: Term, body: object) -> Term:
        assert isinstance(like.sort, MapSort) and isinstance(like.sort.value, MapSort)
        return map_of(Row, body, like.sort.value.value)  # type: ignore[arg-type]

    def request_of(row: Term, body: object) -> Term:
        """``body(request)`` for the request a real row stands for (rows 0..requests-1)."""
        value = body(lift(count - 1, Request))  # type: ignore[operator]
        for index in range(count - 2, -1, -1):
            value = if_then_else(row == index, body(lift(index, Request)), value)  # type: ignore[operator]
        return value  # type: ignore[no-any-return]

    @machine.action(actor="rank:{rank}", rank=Rank)
    def execute_model(rank: Term) -> Step:
        """add_requests, update_requests, prepare_inputs: the step's attention metadata."""
        position = state.sampled[rank]
        record = state.batch[position]
        previous = if_then_else(rank == 0, rank, rank - 1)
        # PP: a stage runs step N after the stage before it ran N (it receives its hidden states).
        upstream_ran = (rank == 0) | (state.sampled[previous] + if_then_else(state.executed[previous], 1, 0) > position)

        def row(request: Term) -> Term:
            return record[request]

        def scheduled(request: Term) -> Term:
            return row(request).field("scheduled") > 0

        def new(request: Term) -> Term:
            return scheduled(request) & row(request).field("new")

        added = per_request(state.added, lambda q: state.added[rank][q] | new(q))
        prefill_len = per_request(state.prefill_len, lambda q: if_then_else(new(q), sizes.prefill_len, state.prefill_len[rank][q]))
        gpu = per_request(state.gpu, lambda q: if_then_else(new(q), row(q).field("computed"), state.gpu[rank][q]))
        if fixed:  # update_requests: refresh from the scheduler, then min(mirror, prefill_len) everywhere
            mirror = per_request(state.mirror, lambda q: if_then_else(scheduled(q), row(q).field("computed"), state.mirror[rank][q]))
            prefill_tokens = per_request(state.prefill_tokens, lambda q: minimum(mirror[q], prefill_len[q]))
        else:  # add_requests sets both from the scheduler; update_requests only appends blocks
            mirror = per_request(state.mirror, lambda q: if_then_else(new(q), row(q).field("computed"), state.mirror[rank][q]))
            prefill_tokens = per_request(state.prefill_tokens, lambda q: if_then_else(
                new(q), row(q).field("computed"), state.prefill_tokens[rank][q]))
        upper = per_row(state.upper, lambda r: if_then_else(
            r < count, request_of(r, lambda q: if_then_else(scheduled(q), mirror[q] + row(q).field("scheduled"), 0)), 0))
        seq_len = per_row(state.seq_len, lambda r: if_then_else(
            r < count, request_of(r, lambda q: if_then_else(scheduled(q), gpu[q] + row(q).field("scheduled"), 0)), 0))
        real = per_row(state.real, lambda r: (r < count) & request_of(r, scheduled))
        return Step(conjunction(~state.executed[rank], position < state.batch.length(), upstream_ran), {
            state.executed: state.executed.set(rank, True),
            state.added: state.added.set(rank, added),
            state.prefill_len: state.prefill_len.set(rank, prefill_len),
            state.gpu: state.gpu.set(rank, gpu),
            state.mirror: state.mirror.set(rank, mirror),
            state.prefill_tokens: state.prefill_tokens.set(rank, prefill_tokens),
            state.built: state.built.set(rank, True),
            state.real: state.real.set(rank, real),
            state.upper: state.upper.set(rank, upper),
            state.seq_len: state.seq_len.set(rank, seq_len),
            # FULL graphs: max over [:num_reqs_padded] (padded rows are 0); otherwise over real rows.
            state.max_seq_len: state.max_seq_len.set(rank, max_of(Row, lambda r: upper[r])),
            state.prefilling: state.prefilling.set(rank, per_request(state.prefilling, lambda q: prefill_tokens[q] < prefill_len[q])),
            state.allowed: state.allowed.set(rank, per_request(state.allowed, lambda q: row(q).field("allowed"))),
            state.alone: state.alone.set(rank, per_request(state.alone, lambda q: row(q).field("alone"))),
            state.sent: state.sent.set(rank, per_request(state.sent, lambda q: row(q).field("computed"))),
            state.seen_mirror: state.seen_mirror.set(rank, mirror),
            state.seen_gpu: state.seen_gpu.set(rank, gpu),
            state.seen_prefill_tokens: state.seen_prefill_tokens.set(rank, prefill_tokens),
            state.seen_prefill_len: state.seen_prefill_len.set(rank, prefill_len),
        })

    def postprocess(rank: Term, record: Term, sampled: Term) -> dict[Term, object]:
        """post_update on the GPU (num_computed += query_len - num_rejected); pre-fix also the CPU mirror."""

        def rejected(q: Term) -> Term:
            drafts = record[q].field("drafts")
            return if_then_else((drafts > 0) & (sampled[q] > 0), drafts - (sampled[q] - 1), 0)

        updates: dict[Term, object] = {
            state.gpu: state.gpu.set(rank, per_request(state.gpu, lambda q: state.gpu[rank][q] + record[q].field("scheduled") - rejected(q))),
        }
        if not fixed:  # "Advance the CPU mirror optimistically (assume all scheduled accepted)."
            updates[state.mirror] = state.mirror.set(rank, per_request(
                state.mirror, lambda q: state.mirror[rank][q] + record[q].field("scheduled")))
            updates[state.prefill_tokens] = state.prefill_tokens.set(rank, per_request(
                state.prefill_tokens, lambda q: minimum(state.prefill_tokens[rank][q] + record[q].field("scheduled"),
                                                        state.prefill_len[rank][q])))
        return updates

    last = sizes.last
    Accepted = state.Row_.fields[2][1]  # drafts accepted, per request: one integer parameter each
    names = ["accepted"] if count == 1 else [f"accepted_{q}" for q in range(count)]

    def sample_last(**arguments: Term) -> Step:
        """The last rank samples: rejection sampling accepts ``accepted[q]`` of q's drafts;
        pp_broadcast sends (num_sampled, num_rejected) to the other ranks; the output goes to the engine."""
        position = state.sampled[last]
        record = state.batch[position]
        accepted = [arguments[name] for name in names]

        def choice(q: Term) -> Term:
            chosen = accepted[-1]
            for index in range(count - 2, -1, -1):
                chosen = if_then_else(q == index, accepted[index], chosen)
            return chosen

        def num_sampled(q: Term) -> Term:
            chunk = state.gpu[last][q] + record[q].field("scheduled") < state.prefill_len[last][q]  # still prefilling
            return if_then_else((record[q].field("scheduled") > 0) & ~chunk, choice(q) + 1, 0)

        sampled = map_of(Request, num_sampled, state.Result.value)
        counted = state.sampled.set(last, position + 1)
        updates = postprocess(lift(last, Rank), record, sampled)
        updates[state.executed] = state.executed.set(last, False)
        updates.update(retire(state, state.processed, counted, state.results.append(sampled)))
        valid = conjunction(*[accepted[q] <= if_then_else(record[q].field("scheduled") > 0, record[q].field("drafts"), 0)
                              for q in range(count)])
        return Step(conjunction(state.executed[last], valid), updates)  # type: ignore[arg-type]

    sample_last.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY) for name in names])
    machine.add_action("sample_tokens", sample_last, actor=f"rank:{last}",
                       description=(sample_last.__doc__ or "").strip(), **{name: Accepted for name in names})

    if sizes.ranks > 1:
        @machine.action(actor="rank:{rank}", rank=Rank)
        def pp_receive(rank: Term) -> Step:
            """A non-last rank's sample_tokens: pp_receive the last rank's counts, then postprocess."""
            position = state.sampled[rank]
            counted = state.sampled.set(rank, position + 1)
            updates = postprocess(rank, state.batch[position], state.results[position])
            updates[state.executed] = state.executed.set(rank, False)
            updates.update(retire(state, state.processed, counted))
            return Step(conjunction(rank != last, state.executed[rank], position < state.results.length()), updates)  # type: ignore[arg-type]
