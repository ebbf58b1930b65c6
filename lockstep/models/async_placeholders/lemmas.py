"""The async-placeholders lemmas for all sizes: PR #42938's backward scan equals the forward scan.

Both scans are the folds of ``scans.py``, the very steps the model's repair action unrolls. One
fold runs both side by side over a list of any length and also tracks ``in_form``: the prefix
read so far is real* (-1)* (no real token after a -1).

- ``async-placeholders/backward-equals-forward`` (expected ``proved``): on every list of the form
  real* (-1)+ (suffix form, ending with -1) the backward scan's ``first_placeholder`` is the
  forward scan's. The strengthening, proved by induction on the length: both indices lie in
  [0, index]; the forward scan has found a -1 exactly when its ``first`` is at most the current
  index minus one; and while the prefix is in form, either no -1 was seen and the backward
  scan's ``run_start`` is the length so far, or one was and ``run_start == first`` (the run that
  began at the first -1 has not been broken).
- ``async-placeholders/backward-equals-forward-any-list`` (expected ``refuted``): the same claim
  without the suffix form, for every list ending with -1. False: [-1, 0, -1] has its first -1 at
  0 and its trailing run at 2, which is where v0.21.0 would have dropped the real token 0.
"""

from __future__ import annotations

from collections.abc import Callable

from lockstep.models.async_placeholders.scans import BACKWARD, FORWARD, PLACEHOLDER, Accumulators
from lockstep.spec.lemma import Lemma, lemma
from lockstep.spec.sorts import BOOL, Sort, Value, integers
from lockstep.spec.terms import Term, conjunction, if_then_else

TOKEN = integers(PLACEHOLDER, 1)
"""Elements of the lists: -1 and two real token ids (which real id does not matter)."""


def _step(accumulators: dict[str, Term], element: Term, index: Term) -> dict[str, Term]:
    forward = FORWARD.step({name: accumulators[name] for name in FORWARD.accumulators}, element, index)
    backward = BACKWARD.step({name: accumulators[name] for name in BACKWARD.accumulators}, element, index)
    broken = (element != PLACEHOLDER) & accumulators["found"]  # a real token after a -1
    return {
        **forward,
        **backward,
        "in_form": accumulators["in_form"] & ~broken,
        "last_is_placeholder": element == PLACEHOLDER,
    }


def _strengthening(accumulators: Accumulators, index: Term) -> Term:
    first, run_start, found = accumulators["first"], accumulators["run_start"], accumulators["found"]
    return conjunction(
        run_start >= 0,
        run_start <= index,
        first >= 0,
        if_then_else(index > 0, first < index, first == 0),
        (index == 0).implies(~found),
        accumulators["in_form"].implies(if_then_else(found, run_start == first, run_start == index)),
        accumulators["last_is_placeholder"].implies(run_start < index),
        (~accumulators["last_is_placeholder"]).implies(run_start == index),
    )


def _accumulators() -> dict[str, tuple[Sort, Value]]:
    return {
        **FORWARD.accumulators,
        **BACKWARD.accumulators,
        "in_form": (BOOL, True),
        "last_is_placeholder": (BOOL, False),
    }


def _conclusion(require_form: bool) -> Callable[[Accumulators, Term], Term]:
    def conclusion(accumulators: Accumulators, size: Term) -> Term:
        ends_with_placeholder = accumulators["last_is_placeholder"]
        premise = (accumulators["in_form"] & ends_with_placeholder) if require_form else ends_with_placeholder
        return premise.implies(FORWARD.result(accumulators, size) == BACKWARD.result(accumulators, size))

    return conclusion


def _backward_equals_forward(require_form: bool) -> Lemma:
    if require_form:
        name, expected = "async-placeholders/backward-equals-forward", "proved"
        statement = (
            "PR #42938: on every list of the form real* (-1)+, of any length, the backward scan "
            "returns the forward scan's first_placeholder"
        )
    else:
        name, expected = "async-placeholders/backward-equals-forward-any-list", "refuted"
        statement = (
            "counter-lemma: on every list ending with -1 the backward scan returns the forward "
            "scan's index (false outside real* (-1)+: [-1, 0, -1])"
        )
    return lemma(
        name,
        statement,
        expected=expected,
        element=TOKEN,
        accumulators=_accumulators(),
        step=_step,
        invariant=_strengthening,
        conclusion=_conclusion(require_form),
        minimum_size=1,
    )


BACKWARD_EQUALS_FORWARD = _backward_equals_forward(require_form=True)
BACKWARD_EQUALS_FORWARD_ANY_LIST = _backward_equals_forward(require_form=False)
LEMMAS = (BACKWARD_EQUALS_FORWARD, BACKWARD_EQUALS_FORWARD_ANY_LIST)
