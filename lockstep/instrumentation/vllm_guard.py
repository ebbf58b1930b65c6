"""What every vLLM recorder of lockstep shares: a guarded recording that never raises into vLLM, and the wrap
of one vLLM method.

``Guarded`` is one process's recording of one actor: ``guard()`` runs a recording step, and its first error
(an observed value beyond the model's bounds, an attribute a release renamed, a full disk) writes
``<actor>.error.json`` beside the trace (``record.write_failure``, naming the recorder), closes the trace and
stops this actor's recording; vLLM runs on. ``wrap(owner, name, make)`` replaces ``owner.name`` by
``make(original)`` (``functools.wraps``) and returns the function that puts the original back. Imports only
the standard library and ``lockstep.record``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from lockstep import record


@dataclass
class Guarded:
    """One actor's recording in this process: its recorder, the recorder's name (for the failure file), and
    whether it stopped (after the first failure)."""

    actor: str
    recorder_name: str
    recorder: record.TraceRecorder | None = None
    stopped: bool = False

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Run a recording step; its first error is written beside the trace and stops the recording."""
        try:
            yield
        except Exception as error:  # nothing may reach vLLM
            self.stop(error)

    def stop(self, error: BaseException) -> None:
        self.stopped = True
        record.write_failure(self.actor, error, recorder=self.recorder_name)
        recorder, self.recorder = self.recorder, None
        if recorder is not None:
            with contextlib.suppress(Exception):
                recorder.close()

    @property
    def active(self) -> bool:
        return not self.stopped and record.recording_enabled()


def wrap(owner: type, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Callable[[], None]:
    """Replace ``owner.name`` (defined on ``owner`` itself) by ``make(original)``; returns the undo."""
    original = owner.__dict__[name]
    replacement = functools.wraps(original)(make(original))
    setattr(owner, name, replacement)
    return lambda: setattr(owner, name, original)


__all__ = ["Guarded", "wrap"]
