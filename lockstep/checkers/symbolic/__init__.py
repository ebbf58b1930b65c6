"""The Z3 engines (the only package that imports z3): bounded model checking and k-induction."""

from lockstep.checkers.symbolic.bmc import BoundedModelChecker, TranslationBug
from lockstep.checkers.symbolic.induction import Induction

__all__ = ["BoundedModelChecker", "Induction", "TranslationBug"]
