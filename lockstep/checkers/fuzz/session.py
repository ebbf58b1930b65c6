"""What every fuzz session (model or runtime) shares: a seed it can report, and no ``.hypothesis``.

A session without a seed draws one, so that its report always names the seed that re-runs it.
Hypothesis keeps caches under ``.hypothesis/`` in the current directory even without an example
database; a session keeps them in a temporary folder (``lockstep.lifetime.temporary_directory``:
removed afterwards, and by the guardian if the session is killed), unless the user names one with
``HYPOTHESIS_STORAGE_DIRECTORY`` (Hypothesis's own setting).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager


def chosen_seed(seed: int | None) -> int:
    """``seed``, or a fresh one (reported, so the session can be re-run)."""
    return secrets.randbelow(2**32) if seed is None else seed


@contextmanager
def hypothesis_storage() -> Iterator[None]:
    """Hypothesis's storage in a temporary folder for the session (unless the user chose one)."""
    if os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        yield
        return
    from hypothesis.configuration import set_hypothesis_home_dir

    from lockstep.lifetime import temporary_directory

    with temporary_directory("lockstep-hypothesis-", keep=False) as folder:
        set_hypothesis_home_dir(str(folder))
        try:
            yield
        finally:
            set_hypothesis_home_dir(None)


__all__ = ["chosen_seed", "hypothesis_storage"]
