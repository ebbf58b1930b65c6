"""Message clocks: the per-channel numbers that pair a message's sending and receiving events.

The merge (``lockstep.traces.merge``) orders the event carrying ``recv:<channel>`` = n after the one
carrying ``send:<channel>`` = n; ``MessageClocks`` hands out those entries for one process.

``timestamp()`` is the optional ``time_ns`` entry (``TIME_KEY``): when the event happened, in
nanoseconds of the machine's monotonic clock (``CLOCK_MONOTONIC``, one clock for every process of a
machine). It orders nothing by itself: among the events the causal rule allows next, the merge
takes the one that happened first, so the effects of an actor no file records (vLLM's DP
coordinator relaying a request into START_DP_WAVE) come after their causes, as they did.
"""

from __future__ import annotations

import collections
import threading
import time

TIME_KEY = "time_ns"


def timestamp() -> dict[str, int]:
    """The clock entry saying when an event happened (``TIME_KEY``: the machine's monotonic nanoseconds)."""
    return {TIME_KEY: time.monotonic_ns()}


class MessageClocks:
    """Per-channel message numbers: the clock entries a sending and a receiving event carry
    (``send:<channel>`` / ``recv:<channel>`` = n for the channel's n-th message); thread-safe."""

    def __init__(self) -> None:
        self._clock_lock = threading.Lock()
        self._sent: collections.Counter[str] = collections.Counter()
        self._received: collections.Counter[str] = collections.Counter()

    def send(self, channel: str) -> dict[str, int]:
        """The clock entry of the next message sent on ``channel`` (put it on the sending event)."""
        with self._clock_lock:
            self._sent[channel] += 1
            return {f"send:{channel}": self._sent[channel]}

    def receive(self, channel: str) -> dict[str, int]:
        """The clock entry of the next message received on ``channel`` (on the receiving event)."""
        with self._clock_lock:
            self._received[channel] += 1
            return {f"recv:{channel}": self._received[channel]}
