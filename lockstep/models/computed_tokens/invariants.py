"""Strengthening invariants that make U1, U3 and U4 of the post-fix model inductive.

k-induction starts from *any* state in which the properties held for k steps, including states
no run reaches: a batch queue whose records disagree with the scheduler's count, a GPU value
unrelated to the records a rank has not run yet. These invariants say how the counts hang
together in every reachable post-fix state, so that the induction step needs nothing else.

Per rank r and request q, with p = the records r has sampled and n = the records in the queue:
- ``rank_view``: for every record j that r has not sampled yet (p <= j < n) that schedules q, let
  ``base_j`` = the GPU value plus the tokens of the records before j (minus their rejected
  drafts where the last rank has already sampled them). Then ``base_j <= sent_j`` (what the
  scheduler sent is never below the truth) and ``sent_j - base_j`` plus the drafts of the
  records before j whose outcome is unknown is at most ``allowed_j``. At ``execute_model`` of
  j, ``base_j`` is the GPU value, so these are U1 and U3.
- ``scheduler_view``: a running request's ``num_computed_tokens`` is the GPU value plus every
  unsampled record's tokens, corrected by the rejected drafts between the scheduler's and the
  rank's progress; so the next record's value and allowance again satisfy ``rank_view``.
- ``bookkeeping``: the queue positions agree (the last rank's results are the sampled records,
  the scheduler only updates from sampled records, a running rank has a record to run), sampled
  counts are at most drafts + 1, and a request a rank has not added has GPU value 0, appears in
  no record that rank has sampled, and its first record is its admission with value 0.
"""

from __future__ import annotations

from lockstep.models.computed_tokens.scheduler import RUNNING, WAITING
from lockstep.models.computed_tokens.state import State
from lockstep.spec.terms import Term, conjunction, disjunction, if_then_else, lift


def invariants(state: State) -> list[tuple[str, Term]]:
    sizes = state.sizes
    capacity, count = sizes.capacity, sizes.requests
    n = state.batch.length()
    known = state.results.length()

    def row(j: int, q: int) -> Term:
        return state.batch[j][q]

    def inside(j: int) -> Term:
        return lift(j) < n

    def rejected(j: int, q: int) -> Term:
        """The rejected drafts of record j for q, where the last rank has sampled it (else 0)."""
        drafts, sampled = row(j, q).field("drafts"), state.results[j][q]
        return if_then_else((lift(j) < known) & (drafts > 0) & (sampled > 0), drafts - (sampled - 1), 0)

    def rank_view(r: int, q: int) -> Term:
        p = state.sampled[r]
        parts = []
        base: Term = state.gpu[r][q]
        unknown: Term = lift(0)
        for j in range(capacity):
            pending = inside(j) & (lift(j) >= p)
            sent, allowed = row(j, q).field("computed"), row(j, q).field("allowed")
            scheduled = row(j, q).field("scheduled") > 0
            parts.append((pending & scheduled).implies(conjunction(base <= sent, sent - base + unknown <= allowed)))
            base = base + if_then_else(pending, row(j, q).field("scheduled") - rejected(j, q), 0)
            unknown = unknown + if_then_else(pending & (lift(j) >= known), row(j, q).field("drafts"), 0)
        return conjunction(*parts)

    def scheduler_view(r: int, q: int) -> Term:
        p, processed = state.sampled[r], state.processed
        total: Term = state.gpu[r][q]
        for j in range(capacity):
            here = inside(j)
            total = total + if_then_else(here & (lift(j) >= p), row(j, q).field("scheduled"), 0)
            total = total + if_then_else(here & (lift(j) >= processed) & (lift(j) < p), rejected(j, q), 0)
            total = total - if_then_else(here & (lift(j) >= p) & (lift(j) < processed), rejected(j, q), 0)
        return (state.status[q] == RUNNING).implies(state.computed[q] == total)

    def bookkeeping() -> Term:
        parts = [known <= n, state.processed <= known, state.sampled[sizes.last] == known,
                 n - state.processed <= sizes.batch_queue,  # the engine schedules only into a free slot
                 (state.processed >= 1).implies(disjunction(*[state.sampled[r] == 0 for r in range(sizes.ranks)]))]  # retired at once
        for r in range(sizes.ranks):
            parts.append(state.sampled[r] <= n)
            parts.append(state.executed[r].implies(state.sampled[r] < n))
        for j in range(capacity):
            for q in range(count):
                first = row(j, q).field("new")
                parts.append((inside(j) & (lift(j) < known)).implies(
                    state.results[j][q] <= if_then_else(row(j, q).field("scheduled") > 0, row(j, q).field("drafts") + 1, 0)))
                parts.append((inside(j) & first).implies(conjunction(
                    row(j, q).field("computed") == 0, row(j, q).field("scheduled") > 0,
                    *[row(i, q).field("scheduled") == 0 for i in range(j)])))
                parts.append((inside(j) & (state.status[q] == WAITING)).implies(row(j, q).field("scheduled") == 0))
        for q in range(count):
            parts.append((state.status[q] == WAITING).implies(state.computed[q] == 0))
            for r in range(sizes.ranks):
                p = state.sampled[r]
                not_added = ~state.added[r][q]
                parts.append(not_added.implies(conjunction(
                    state.gpu[r][q] == 0,
                    *[(inside(j) & (lift(j) < p)).implies(row(j, q).field("scheduled") == 0) for j in range(capacity)])))
                unrun = p + if_then_else(state.executed[r], 1, 0)
                parts.append(conjunction(*[
                    (inside(j) & (lift(j) >= unrun) & row(j, q).field("new")).implies(not_added) for j in range(capacity)]))
                parts.append((state.status[q] == WAITING).implies(not_added))
                parts.append((not_added & (state.status[q] != WAITING)).implies(disjunction(  # admitted: its record is ahead
                    *[inside(j) & (lift(j) >= unrun) & row(j, q).field("new") for j in range(capacity)])))
                for j in range(capacity):  # an unadded request's first record the rank has not run admits it
                    cached = inside(j) & (lift(j) >= unrun) & (row(j, q).field("scheduled") > 0) & ~row(j, q).field("new")
                    admitted = [(lift(i) >= unrun) & row(i, q).field("new") for i in range(j)]
                    parts.append((cached & not_added).implies(disjunction(lift(False), *admitted)))
                parts.append(conjunction(*[  # a rank that ran record j has added every request j schedules
                    (inside(j) & (lift(j) < unrun) & (row(j, q).field("scheduled") > 0)).implies(~not_added) for j in range(capacity)]))
        return conjunction(*parts)

    named = [("bookkeeping", bookkeeping())]
    for r in range(sizes.ranks):
        for q in range(count):
            named.append((f"rank_view_{r}_{q}", rank_view(r, q)))
            named.append((f"scheduler_view_{r}_{q}", scheduler_view(r, q)))
    return named
