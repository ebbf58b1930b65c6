"""The connection between the two engines: protocol messages, the scripted order, the run's end.

One ``multiprocessing.connection`` socket (FIFO both ways) carries

- the protocol's messages, counted on both sides: P's hand-off of ``kv_transfer_params``
  (``handoff``: in vLLM through the proxy), D's NIXL notification ``notify`` ("done reading
  request r"), D's lease release ``unneeded`` (D's heartbeats for the request stop: D no longer
  needs P's blocks) and D's ``read`` request, which P answers with the block tensor over
  ``torch.distributed`` (NIXL's one-sided read, made two-sided);
- ``progress``: under a script (``reproduction``), the steps an engine took, so each engine
  takes its next scripted step only when every earlier step of the script, on either side, is
  done. The socket is FIFO: when an engine learns the peer's progress it has every message the
  peer sent before;
- the end: an engine with nothing to do sends ``quiet`` (its message counts, whether all its
  requests are settled, what it still holds); P ends the run when both are quiet and every
  counted message arrived (``stop``): completed when both sides are settled, otherwise stuck.

A ``Link`` also numbers each message's trace clock (``send:handoff:R`` / ``recv:handoff:R``, one
channel per request and kind), so the two trace files merge in causal order.
"""

from __future__ import annotations

from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from lockstep.impl.runtime import StatusBoard

COUNTED = ("handoff", "notify", "unneeded", "read")


class PeerGone(RuntimeError):
    """The other engine's process ended (its failure is its own to report)."""


class Link:
    """This engine's end of the connection, its message counts and its place in a script."""

    def __init__(self, connection: Connection, rank: int, order: Sequence[int], status: StatusBoard) -> None:
        self.connection, self.rank, self.status = connection, rank, status
        self.order = list(order)
        self.positions = [index for index, who in enumerate(order) if who == rank]
        self.done = 0  # scripted steps this engine took
        self.peer_done = 0  # scripted steps the peer reported
        self.sent = self.received = 0

    # ---------------------------------------------------------------------------------- messages
    def send(self, kind: str, **fields: Any) -> None:
        if kind in COUNTED:
            self.sent += 1
        self.connection.send({"kind": kind, **fields})

    def receive(self, timeout: float | None) -> list[dict[str, Any]]:
        """The messages waiting, after waiting up to ``timeout`` seconds for one (None: until one comes)."""
        found: list[dict[str, Any]] = []
        blocking = timeout is None or timeout > 0
        try:
            if blocking:
                self.status.update("receive", f"receive(rank:{1 - self.rank})")
            waiting = self.connection.poll(timeout)
            while waiting:
                message = self.connection.recv()
                if message.get("kind") in COUNTED:
                    self.received += 1
                if message.get("kind") == "progress":
                    self.peer_done = int(message["done"])
                found.append(message)
                waiting = self.connection.poll(0)
        except (EOFError, OSError) as error:
            raise PeerGone(f"rank {1 - self.rank} closed the connection") from error
        finally:
            if blocking:
                self.status.update("running")
        return found

    # ---------------------------------------------------------------------------------- script
    def scripted(self) -> bool:
        """Whether the script still has steps to take (on either side)."""
        return self.done + self.peer_done < len(self.order)

    def my_turn(self) -> bool:
        """Whether this engine's next scripted step is the script's next step."""
        return self.done < len(self.positions) and self.positions[self.done] == self.done + self.peer_done

    def advance(self) -> None:
        """This engine took its scripted step: tell the peer."""
        self.done += 1
        self.send("progress", done=self.done)

    def close(self) -> None:
        self.connection.close()
