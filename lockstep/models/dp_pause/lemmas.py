"""The dp-pause lemma for all sizes: the SUM vote of ``sync_dp_state`` (vLLM v0.21.0,
``vllm/config/parallel.py``), stated with the model's own decision rule (``engine.sync_dp_state``).

For every dp_size >= 1 and every 0/1 vector of (unfinished, pending_pause) votes: the sum of the
unfinished flags is positive exactly when some rank has work (the OR), the vote count equals
dp_size exactly when every rank voted (the AND), a partial vote keeps every rank stepping, and
after consensus only real work keeps the wave running. Proved by induction on the number of ranks
(``lockstep prove-lemmas``); the strengthening relates the running sums to the running OR/AND.
"""

from __future__ import annotations

from lockstep.models.dp_pause.engine import sync_dp_state
from lockstep.spec.lemma import Lemma, lemma
from lockstep.spec.sorts import BOOL, INTEGER, integers, record
from lockstep.spec.terms import Term, conjunction


def _sum_vote_lemma() -> Lemma:
    """The SUM vote of sync_dp_state, for every dp_size >= 1 and every 0/1 vote vector."""
    Vote = record("Vote", unfinished=integers(0, 1), pending=integers(0, 1))

    def step(acc: dict[str, Term], vote: Term, index: Term) -> dict[str, Term]:
        unfinished, pending = vote.field("unfinished"), vote.field("pending")
        return {
            "unfinished_sum": acc["unfinished_sum"] + unfinished,
            "votes": acc["votes"] + pending,
            "any_unfinished": acc["any_unfinished"] | (unfinished == 1),
            "any_pending": acc["any_pending"] | (pending == 1),
            "all_pending": acc["all_pending"] & (pending == 1),
        }

    def invariant(acc: dict[str, Term], index: Term) -> Term:
        return conjunction(
            acc["unfinished_sum"] >= 0,
            acc["unfinished_sum"] <= index,
            acc["votes"] >= 0,
            acc["votes"] <= index,
            (acc["unfinished_sum"] > 0) == acc["any_unfinished"],
            (acc["votes"] > 0) == acc["any_pending"],
            (acc["votes"] == index) == acc["all_pending"],
        )

    def conclusion(acc: dict[str, Term], size: Term) -> Term:
        running, consensus = sync_dp_state(acc["unfinished_sum"], acc["votes"], size)
        return conjunction(
            (acc["unfinished_sum"] > 0) == acc["any_unfinished"],  # the SUM of flags is their OR
            consensus == acc["all_pending"],  # the vote count equals dp_size exactly when all voted
            (acc["any_pending"] & ~acc["all_pending"]).implies(running),  # a partial vote keeps all stepping
            consensus.implies(running == acc["any_unfinished"]),  # after consensus: only real work runs
        )

    return lemma(
        "dp-pause/sum-vote",
        "sync_dp_state: sum(unfinished) > 0 is the OR, sum(pending) == dp_size is the AND, and a partial "
        "vote keeps every rank stepping, for every dp_size >= 1",
        expected="proved",
        element=Vote,
        accumulators={
            "unfinished_sum": (INTEGER, 0),
            "votes": (INTEGER, 0),
            "any_unfinished": (BOOL, False),
            "any_pending": (BOOL, False),
            "all_pending": (BOOL, True),
        },
        step=step,
        invariant=invariant,
        conclusion=conclusion,
        minimum_size=1,
    )


LEMMAS = (_sum_vote_lemma(),)
