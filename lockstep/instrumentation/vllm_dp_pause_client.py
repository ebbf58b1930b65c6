"""The client half of the dp-pause vLLM instrumentation (``vllm_dp_pause``): ``DPLBAsyncMPClient``.

``client_add_request`` is written before ``_send_input(ADD)`` sends (with the ``send:`` clock of the FIRST_REQ
that ``add_request_async`` sends right after it when ``engines_running`` is false), ``client_abort_request``
before ``_send_input(ABORT)`` sends (``AsyncLLM.abort`` → ``abort_requests_async``: one ABORT to the engine of
the requests, only for requests still in flight; the model's ABORT aborts one request, so a scenario aborts
one at a time), ``client_<call>`` before
``_call_utility_async`` sends one utility call to one engine, and ``client_<call>_returned`` after
``call_utility_async`` has every engine's reply (one ``recv:`` clock per engine). A pause in another mode than
the client's last one (at first the lowest mode the header's ``pause_modes`` allows) is preceded by
``client_choose_pause_mode``. vLLM's are coroutine functions and lockstep's runtime's plain ones; the wrappers
follow the original. The header's variant, sync interval and unrecorded names are the release's
(``Recording``). As on the engine side, a failing write stops the client's recording (``client.error.json``
beside the trace) and never reaches vLLM. Imports only the standard library and ``lockstep.record``.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import threading
from collections.abc import Callable
from typing import Any

from lockstep import record
from lockstep.instrumentation.vllm_dp_pause import (
    CALLS,
    VARIANT_ENVIRONMENT,
    _patch,
    header_parameters,
)
from lockstep.instrumentation.vllm_releases import Recording

ACTOR = "client"
PAUSE_MODES = ("keep", "abort", "wait")  # bit i of the header's pause_modes: the model's PauseMode members in order


class ClientTrace:
    """The recording of the front-end client (actor ``client``); ``failed`` once a write failed."""

    def __init__(self, recorder: record.TraceRecorder, ranks: int, recording: Recording, pause_modes: int = 1) -> None:
        self.recorder, self.ranks, self.recording, self.lock = recorder, ranks, recording, threading.Lock()
        self.failed = False
        self.aborts = 0  # the model's client.aborts: ABORTs sent
        allowed = [mode for bit, mode in enumerate(PAUSE_MODES) if pause_modes & (1 << bit)]
        self.pause_mode = allowed[0] if allowed else PAUSE_MODES[0]  # the model's client.pause_mode

    def write(self, write: Callable[[], None]) -> None:
        """Run one guarded write: the first failure writes the error file and stops this recording."""
        with self.lock:
            if self.failed:
                return
            try:
                write()
            except Exception as error:
                self.failed = True
                record.write_failure(ACTOR, error, release=self.recording.release, events_written=self.recorder.events)
                with contextlib.suppress(Exception):  # the engine runs on whatever the recorder does
                    self.recorder.close()


_clients: dict[int, ClientTrace | None] = {}


def _client_trace(client: Any, recording: Recording) -> ClientTrace | None:
    if id(client) not in _clients:
        _clients[id(client)] = None
        if not record.recording_enabled():
            return None
        try:
            ranks = len(client.core_engines)
            sync_interval = recording.sync_interval(getattr(client, "vllm_config", None))
            variant = os.environ.get(VARIANT_ENVIRONMENT) or recording.variant
            parameters = header_parameters(ranks, sync_interval, recording.unrecorded)
            recorder = record.from_environment(ACTOR, "dp-pause", variant, parameters, timestamps=True)
        except Exception as error:
            record.write_failure(ACTOR, error, release=recording.release)
            return None
        modes = int(parameters.get("pause_modes", 1))
        _clients[id(client)] = None if recorder is None else ClientTrace(recorder, ranks, recording, modes)
    return _clients[id(client)]


def _either(
    original: Callable[..., Any], before: Callable[..., None], after: Callable[..., None]
) -> Callable[..., Any]:
    """A wrapper calling ``before(self, ...)``, the original (awaited if it is a coroutine function), then ``after``."""
    if inspect.iscoroutinefunction(original):

        async def asynchronous(self: Any, *args: Any, **kwargs: Any) -> Any:
            before(self, *args, **kwargs)
            result = await original(self, *args, **kwargs)
            after(self, *args, **kwargs)
            return result

        return asynchronous

    def synchronous(self: Any, *args: Any, **kwargs: Any) -> Any:
        before(self, *args, **kwargs)
        result = original(self, *args, **kwargs)
        after(self, *args, **kwargs)
        return result

    return synchronous


def patch_client(client_class: type, recording: Recording, undo: list[Callable[[], None]]) -> None:
    def nothing(self: Any, *args: Any, **kwargs: Any) -> None:
        return None

    def adding(self: Any, request_type: Any, request: Any, engine: Any = None, *rest: Any, **kwargs: Any) -> None:
        trace = _client_trace(self, recording)
        kind = getattr(request_type, "name", None)
        if trace is None or kind not in ("ADD", "ABORT"):
            return

        def write() -> None:
            rank = int.from_bytes(engine if engine is not None else self.core_engine, "little")
            clock = trace.recorder.send(f"client>rank:{rank}")
            if kind == "ABORT":
                trace.aborts += 1
                trace.recorder.event("client_abort_request", {"rank": rank}, {"client.aborts": trace.aborts}, clock)
                return
            if not self.engines_running:  # add_request_async sends FIRST_REQ right after this
                clock.update(trace.recorder.send("client>coordinator"))
            trace.recorder.event(
                "client_add_request",
                {"rank": rank},
                {"client.current_wave": int(request.current_wave), "client.engines_running": True},
                clock,
            )

        trace.write(write)

    def calling(self: Any, method: str, *args: Any, engine: Any = None, **kwargs: Any) -> None:
        trace = _client_trace(self, recording)
        if trace is None or method not in CALLS:
            return

        def write() -> None:
            rank = int.from_bytes(engine, "little")
            mode = str(args[0]) if method == "pause_scheduler" and args else trace.pause_mode
            if mode != trace.pause_mode:  # pause_generation(mode=...) in another mode than the last
                trace.recorder.event("client_choose_pause_mode", {"mode": mode.upper()})
                trace.pause_mode = mode
            trace.recorder.event(CALLS[method], {"rank": rank}, None, trace.recorder.send(f"client>rank:{rank}"))

        trace.write(write)

    def returned(self: Any, method: str, *args: Any, **kwargs: Any) -> None:
        trace = _client_trace(self, recording)
        if trace is None or method not in CALLS:
            return

        def write() -> None:
            clock: dict[str, int] = {}
            for rank in range(trace.ranks):  # every engine's reply is in
                clock.update(trace.recorder.receive(f"rank:{rank}>client"))
            trace.recorder.event(CALLS[method] + "_returned", {}, None, clock)

        trace.write(write)

    _patch(client_class, "_send_input", lambda original: _either(original, adding, nothing), undo)
    _patch(client_class, "_call_utility_async", lambda original: _either(original, calling, nothing), undo)
    _patch(client_class, "call_utility_async", lambda original: _either(original, nothing, returned), undo)
