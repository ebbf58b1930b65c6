"""The cudagraph-pp lemma for all sizes: PR #35162's proposed num_reqs adjustment
(``descriptors.adjusted_num_reqs``, the same code the ``full-adjustment`` mutant captures with).

On its domain as at capture, 1 <= num_reqs <= num_tokens (``create_forward_fn`` takes
``num_reqs = min(num_tokens, max_num_reqs)``), the adjusted request count divides num_tokens and
lies in [1, num_reqs]: so the dummy batch it builds is uniform, as the TRTLLM decode path asserts
(D1). That is why the adjustment is not where the hazard lies: the hazard is R1, a FULL graph
captured with fewer requests than its descriptor advertises. The counter-lemma shows the domain
matters: with num_reqs > num_tokens the adjustment leaves num_reqs unchanged, and it does not
divide (num_tokens = 1, num_reqs = 2). Both are over two unbounded integers, proved directly by
Z3 (``lockstep prove-lemmas``), not as folds over a list.
"""

from __future__ import annotations

from lockstep.models.cudagraph_pp.descriptors import adjusted_num_reqs
from lockstep.spec.lemma import IntegerLemma, integer_lemma
from lockstep.spec.terms import Term, conjunction

PARAMETERS = ("num_reqs", "num_tokens")


def divides_and_bounded(num_reqs: Term, num_tokens: Term) -> Term:
    """The conclusion: the adjusted count divides num_tokens and lies in [1, num_reqs]."""
    adjusted = adjusted_num_reqs(num_reqs, num_tokens)
    return conjunction(adjusted >= 1, adjusted <= num_reqs, num_tokens % adjusted == 0)


def _adjustment_lemma() -> IntegerLemma:
    return integer_lemma(
        "cudagraph-pp/num-reqs-adjustment",
        "#35162's num_reqs adjustment: for 1 <= num_reqs <= num_tokens the result divides num_tokens "
        "and lies in [1, num_reqs]",
        expected="proved",
        parameters=PARAMETERS,
        domain=lambda num_reqs, num_tokens: (num_reqs >= 1) & (num_reqs <= num_tokens),
        conclusion=divides_and_bounded,
    )


def _adjustment_counter_lemma() -> IntegerLemma:
    return integer_lemma(
        "cudagraph-pp/num-reqs-adjustment-beyond-domain",
        "counter-lemma: for num_reqs > num_tokens >= 1 the adjustment does not apply and num_reqs does "
        "not divide num_tokens (false claim: it divides)",
        expected="refuted",
        parameters=PARAMETERS,
        domain=lambda num_reqs, num_tokens: (num_tokens >= 1) & (num_reqs > num_tokens),
        conclusion=divides_and_bounded,
    )


LEMMAS = (_adjustment_lemma(), _adjustment_counter_lemma())
