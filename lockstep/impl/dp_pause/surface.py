"""The vLLM v0.21.0 names the dp-pause engine core exposes, so that code written for vLLM runs on it.

``lockstep.instrumentation.vllm_dp_pause`` monkeypatches vLLM's ``DPEngineCoreProc``,
``ParallelConfig`` and the worker's DP all-reduce (``vllm.v1.worker.dp_utils._run_ar``); its test
applies the same patch to the runtime. For that the runtime's engine core has vLLM's shape at the
points the patch touches, and this module holds the pieces of that shape that are not the engine
class itself:

- ``EngineCoreRequestType`` and ``PauseState``: enums with vLLM's member names (the runtime adds
  ``SHUTDOWN`` and ``ARRIVAL_FAILED``, which are not protocol messages);
- ``Scheduler``: ``pause_state``, ``waiting``/``running``, ``finished_req_ids``,
  ``has_unfinished_requests``, ``has_requests``, ``set_pause_state``, ``schedule``;
- ``EngineCoreOutputs``: an output item with vLLM's field names (``utility_output``,
  ``start_wave``, ``wave_complete``, ``finished_requests``), sent as the runtime's wire messages;
- ``OutputQueue``: ``put_nowait((client_index, outputs))`` as the engine core's output queue,
  client index -1 meaning the coordinator; with the runtime's own recording on it holds the
  messages until the event that sends them is on file (``release``), else it sends at once (as
  vLLM's output thread does);
- ``ParallelConfig.sync_dp_state`` / ``has_unfinished_dp``: the engine-level all-reduces on the
  gloo ``dp_group``; ``coordinate_batch_across_dp`` → ``_run_ar``: the workers' DP all-reduce of every forward.

Imports torch only through the ``Collective`` it is handed.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lockstep.impl.distributed import Collective


class EngineCoreRequestType(enum.Enum):
    """vLLM's request types (``vllm.v1.engine``), plus the runtime's own SHUTDOWN and ARRIVAL_FAILED."""

    ADD = b"\x00"
    ABORT = b"\x01"
    START_DP_WAVE = b"\x02"
    UTILITY = b"\x03"
    EXECUTOR_FAILED = b"\x04"
    WAKEUP = b"\x05"
    SHUTDOWN = b"lockstep-shutdown"
    ARRIVAL_FAILED = b"lockstep-arrival-failed"


class PauseState(enum.Enum):
    """vLLM's ``vllm.v1.core.sched.interface.PauseState`` (the runtime pauses with mode keep only)."""

    UNPAUSED = 0
    PAUSED_NEW = 1
    PAUSED_ALL = 2


class Scheduler:
    """The parts of vLLM's ``Scheduler`` the busy loop reads: every request finishes in the forward
    that first schedules it, so a request waits until then and ``running`` stays empty."""

    def __init__(self) -> None:
        self.pause_state = PauseState.UNPAUSED
        self.waiting: list[int] = []
        self.running: list[int] = []
        self.finished_req_ids: set[int] = set()

    def set_pause_state(self, state: PauseState) -> None:
        self.pause_state = state

    def get_num_unfinished_requests(self) -> int:
        """Pause-aware, as vLLM's: none when PAUSED_ALL."""
        return 0 if self.pause_state == PauseState.PAUSED_ALL else len(self.waiting) + len(self.running)

    def has_unfinished_requests(self) -> bool:
        return self.get_num_unfinished_requests() > 0

    def has_requests(self) -> bool:
        """Unfinished requests, or requests finished since the last ``schedule``."""
        return self.has_unfinished_requests() or bool(self.finished_req_ids)

    def schedule(self) -> bool:
        """Clear the finished ids; whether a request is scheduled (only when UNPAUSED)."""
        self.finished_req_ids.clear()
        return self.pause_state == PauseState.UNPAUSED and bool(self.waiting)

    def update_from_output(self) -> list[int]:
        """The scheduled requests finished in the forward: their ids."""
        finished, self.waiting = self.waiting, []
        self.finished_req_ids.update(finished)
        return finished


@dataclass
class EngineCoreOutputs:
    """What one output-queue item carries (vLLM's field names): a utility call's reply (the call's
    kind: PAUSE, RPC, RESUME), a wave start or completion for the coordinator, finished requests."""

    engine_index: int
    utility_output: str | None = None
    start_wave: int | None = None
    wave_complete: int | None = None
    finished_requests: list[int] = field(default_factory=list)

    def messages(self) -> list[dict[str, Any]]:
        """The runtime's wire messages for this item."""
        rank = self.engine_index
        found: list[dict[str, Any]] = [
            {"kind": "OUTPUT", "request": request, "rank": rank} for request in self.finished_requests
        ]
        if self.utility_output is not None:
            found.append({"kind": "REPLY", "call": self.utility_output, "rank": rank})
        if self.start_wave is not None:
            found.append({"kind": "START_WAVE", "wave": self.start_wave, "rank": rank})
        if self.wave_complete is not None:
            found.append({"kind": "WAVE_COMPLETE", "wave": self.wave_complete, "rank": rank})
        return found


class OutputQueue:
    """The engine core's output queue: ``put_nowait((client_index, outputs))``; index -1 is the
    coordinator, any other the client. ``hold``: keep messages until ``release`` (the runtime's own
    recording writes the event that sends them first); else send at once."""

    def __init__(self, client: Connection, coordinator: Connection, hold: bool) -> None:
        self.client, self.coordinator, self.hold = client, coordinator, hold
        self.held: list[tuple[int, EngineCoreOutputs]] = []
        self._lock = threading.Lock()

    def put_nowait(self, item: tuple[int, EngineCoreOutputs]) -> None:
        if self.hold:
            self.held.append(item)
        else:
            self._send(item)

    def take(self) -> list[tuple[int, EngineCoreOutputs]]:
        items, self.held = self.held, []
        return items

    def release(self, items: list[tuple[int, EngineCoreOutputs]]) -> None:
        for item in items:
            self._send(item)

    def _send(self, item: tuple[int, EngineCoreOutputs]) -> None:
        client_index, outputs = item
        connection = self.coordinator if client_index == -1 else self.client
        with self._lock:
            for message in outputs.messages():
                connection.send(message)


class DPGroup:
    """The engines' ``dp_group``: the traced collective and the number of members."""

    def __init__(self, collective: Collective, size: int) -> None:
        self.collective, self.size = collective, size


class ParallelConfig:
    """vLLM's ``ParallelConfig`` static methods for the engines' gloo ``dp_group``."""

    @staticmethod
    def sync_dp_state(dp_group: DPGroup, has_unfinished: bool, pending_pause: bool) -> tuple[bool, bool]:
        """SUM of [unfinished, pending_pause]: (keep running, pause consensus), as v0.21.0."""
        total = dp_group.collective.all_reduce("sync_sum", [int(has_unfinished), int(pending_pause)], "sum")
        return total[0] > 0 or total[1] % dp_group.size != 0, total[1] == dp_group.size

    @staticmethod
    def has_unfinished_dp(dp_group: DPGroup, has_unfinished: bool, op: str = "sync_max") -> bool:
        """MAX of [unfinished]; ``op`` is the model's name for the call site (the runtime's trace)."""
        return dp_group.collective.all_reduce(op, [int(has_unfinished)], "max")[0] > 0


def coordinate_batch_across_dp(worker_dp: Collective, num_tokens: int, dp_size: int, dp_rank: int) -> list[int]:
    """Every forward's coordination across the DP ranks (vLLM ``dp_utils``): calls ``_run_ar`` by
    its module name, as vLLM's ``_synchronize_dp_ranks`` does, so patching ``_run_ar`` reaches it."""
    return _run_ar(worker_dp, num_tokens, dp_size, dp_rank)


def _run_ar(worker_dp: Collective, num_tokens: int, dp_size: int, dp_rank: int) -> list[int]:
    """The workers' DP all-reduce of every forward (vLLM ``dp_utils._run_ar``: a [4, dp_size] tensor)."""
    counts = [0] * (4 * dp_size)
    counts[dp_rank] = num_tokens
    return worker_dp.all_reduce("forward", counts, "sum", shape=(4, dp_size))
