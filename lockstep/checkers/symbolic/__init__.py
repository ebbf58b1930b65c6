"""The Z3 engines (the only package that imports z3): bounded model checking and k-induction."""

from lockstep.checkers.symbolic.bmc import BoundedModelChecker, TranslationBug

__all__ = ["BoundedModelChecker", "TranslationBug"]
