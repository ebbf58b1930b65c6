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

from lockstep.models.computed_tokens.state import State, Status
from lockstep.spec.terms import Term, conjunction, disjunction, if_then_else, lift


def invariants(state: State) -> list[tuple[str, Term]]:
    """Every strengthening invariant, named: ``bookkeeping``, then per rank r and request q
    ``rank_view_r_q`` and ``scheduler_view_r_q``."""
    named = [("bookkeeping", bookkeeping(state))]
    for r in range(state.sizes.ranks):
        for q in range(state.sizes.requests):
            named.append((f"rank_view_{r}_{q}", rank_view(state, r, q)))
            named.append((f"scheduler_view_{r}_{q}", scheduler_view(state, r, q)))
    return named


def _row(state: State, j: int, q: int) -> Term:
    """Request q's row of the record at queue position j."""
    return state.batch[j][q]


def _inside(state: State, j: int) -> Term:
    """Queue position j holds a record."""
    return lift(j) < state.batch.length()


def _rejected(state: State, j: int, q: int) -> Term:
    """The rejected drafts of record j for q, where the last rank has sampled it (else 0)."""
    drafts, sampled = _row(state, j, q).field("drafts"), state.results[j][q]
    known = state.results.length()
    return if_then_else((lift(j) < known) & (drafts > 0) & (sampled > 0), drafts - (sampled - 1), 0)


def rank_view(state: State, r: int, q: int) -> Term:
    """What rank r will see for q at each record it has not sampled yet: U1 and U3 hold there."""
    p, known = state.sampled[r], state.results.length()
    parts = []
    base: Term = state.gpu[r][q]
    unknown: Term = lift(0)
    for j in range(state.sizes.capacity):
        row = _row(state, j, q)
        pending = _inside(state, j) & (lift(j) >= p)
        sent, allowed = row.field("computed"), row.field("allowed")
        scheduled = row.field("scheduled") > 0
        parts.append((pending & scheduled).implies(conjunction(base <= sent, sent - base + unknown <= allowed)))
        base = base + if_then_else(pending, row.field("scheduled") - _rejected(state, j, q), 0)
        unknown = unknown + if_then_else(pending & (lift(j) >= known), row.field("drafts"), 0)
    return conjunction(*parts)


def scheduler_view(state: State, r: int, q: int) -> Term:
    """A running request's num_computed_tokens is rank r's GPU value plus its unsampled records' tokens."""
    p, processed = state.sampled[r], state.processed
    total: Term = state.gpu[r][q]
    for j in range(state.sizes.capacity):
        here, row = _inside(state, j), _row(state, j, q)
        total = total + if_then_else(here & (lift(j) >= p), row.field("scheduled"), 0)
        total = total + if_then_else(here & (lift(j) >= processed) & (lift(j) < p), _rejected(state, j, q), 0)
        total = total - if_then_else(here & (lift(j) >= p) & (lift(j) < processed), _rejected(state, j, q), 0)
    return (state.status[q] == Status.RUNNING).implies(state.computed[q] == total)


def bookkeeping(state: State) -> Term:
    """The queue positions agree; sampled counts are bounded; unadded requests are untouched."""
    sizes = state.sizes
    n, known = state.batch.length(), state.results.length()
    parts = [
        known <= n,
        state.processed <= known,
        state.sampled[sizes.last] == known,
        n - state.processed <= sizes.batch_queue,  # the engine schedules only into a free slot
        (state.processed >= 1).implies(  # retired at once
            disjunction(*[state.sampled[r] == 0 for r in range(sizes.ranks)])
        ),
    ]
    for r in range(sizes.ranks):
        parts.append(state.sampled[r] <= n)
        parts.append(state.executed[r].implies(state.sampled[r] < n))
    for j in range(sizes.capacity):
        for q in range(sizes.requests):
            row, inside = _row(state, j, q), _inside(state, j)
            parts.append(
                (inside & (lift(j) < known)).implies(
                    state.results[j][q] <= if_then_else(row.field("scheduled") > 0, row.field("drafts") + 1, 0)
                )
            )
            parts.append(
                (inside & row.field("new")).implies(
                    conjunction(
                        row.field("computed") == 0,
                        row.field("scheduled") > 0,
                        *[_row(state, i, q).field("scheduled") == 0 for i in range(j)],
                    )
                )
            )
            parts.append((inside & (state.status[q] == Status.WAITING)).implies(row.field("scheduled") == 0))
    for q in range(sizes.requests):
        parts.append((state.status[q] == Status.WAITING).implies(state.computed[q] == 0))
        for r in range(sizes.ranks):
            parts.extend(_unadded(state, r, q))
    return conjunction(*parts)


def _unadded(state: State, r: int, q: int) -> list[Term]:
    """A request rank r has not added has GPU value 0, appears in no record r has sampled, and its
    first record r has not run is its admission; a rank that ran a record has added its requests."""
    capacity, p = state.sizes.capacity, state.sampled[r]
    parts = []
    not_added = ~state.added[r][q]
    parts.append(
        not_added.implies(
            conjunction(
                state.gpu[r][q] == 0,
                *[
                    (_inside(state, j) & (lift(j) < p)).implies(_row(state, j, q).field("scheduled") == 0)
                    for j in range(capacity)
                ],
            )
        )
    )
    unrun = p + if_then_else(state.executed[r], 1, 0)

    def ahead(j: int) -> Term:  # record j, not yet run by r, admits q
        return (lift(j) >= unrun) & _row(state, j, q).field("new")

    parts.append(conjunction(*[(_inside(state, j) & ahead(j)).implies(not_added) for j in range(capacity)]))
    parts.append((state.status[q] == Status.WAITING).implies(not_added))
    parts.append(
        (not_added & (state.status[q] != Status.WAITING)).implies(
            disjunction(  # admitted: its record is ahead
                *[_inside(state, j) & ahead(j) for j in range(capacity)]
            )
        )
    )
    for j in range(capacity):  # an unadded request's first record the rank has not run admits it
        row = _row(state, j, q)
        cached = _inside(state, j) & (lift(j) >= unrun) & (row.field("scheduled") > 0) & ~row.field("new")
        parts.append((cached & not_added).implies(disjunction(lift(False), *[ahead(i) for i in range(j)])))
    parts.append(
        conjunction(
            *[  # a rank that ran record j has added every request j schedules
                (_inside(state, j) & (lift(j) < unrun) & (_row(state, j, q).field("scheduled") > 0)).implies(~not_added)
                for j in range(capacity)
            ]
        )
    )
    return parts
