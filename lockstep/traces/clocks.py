"""Message clocks: the per-channel numbers that pair a message's sending and receiving events.

The merge (``lockstep.traces.merge``) orders the event carrying ``recv:<channel>`` = n after the one
carrying ``send:<channel>`` = n; ``MessageClocks`` hands out those entries for one process.
"""

from __future__ import annotations

import collections
import threading


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
