"""The engine core's queues while a dp-pause trace is recorded (``vllm_dp_pause``).

``HeldOutputs`` stands in for ``engine.output_queue``: items put while a patched function runs are
held and handed on only after the event that sends them is on file. ``TakenInputs`` stands in for
``engine.input_queue``: every item the core thread takes is reported to the engine's trace as its
arrival. Imports only the standard library.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lockstep.instrumentation.vllm_dp_pause import EngineTrace


class HeldOutputs:
    """``engine.output_queue`` while recorded: items are held while a patched function runs and
    handed on after the event that sends them is on file (``take_held`` / ``release_held``)."""

    def __init__(self, queue: Any) -> None:
        self.queue, self.depth = queue, 0
        self.items: list[Any] = []
        self.lock = threading.Lock()

    def put_nowait(self, item: Any) -> None:
        with self.lock:
            if self.depth:
                self.items.append(item)
                return
        self.queue.put_nowait(item)

    def hold(self) -> None:
        with self.lock:
            self.depth += 1

    def unhold(self) -> None:
        with self.lock:
            self.depth -= 1
            items, self.items = (self.items, []) if self.depth == 0 else ([], self.items)
        self.release_held(items)

    def take_held(self) -> list[Any]:
        with self.lock:
            items, self.items = self.items, []
        return items

    def release_held(self, items: list[Any]) -> None:
        for item in items:
            self.queue.put_nowait(item)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.queue, name)


class TakenInputs:
    """``engine.input_queue`` while recorded: each item the core thread takes is recorded as its arrival."""

    def __init__(self, queue: Any, trace: EngineTrace) -> None:
        self.queue, self.trace = queue, trace

    def get(self, *args: Any, **kwargs: Any) -> Any:
        item = self.queue.get(*args, **kwargs)
        self.trace.arrived(item)
        return item

    def get_nowait(self) -> Any:
        item = self.queue.get_nowait()
        if item is not None:
            self.trace.arrived(item)
        return item

    def __getattr__(self, name: str) -> Any:
        return getattr(self.queue, name)


__all__ = ["HeldOutputs", "TakenInputs"]
