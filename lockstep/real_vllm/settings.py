"""The settings lockstep applies to every vLLM process of a check, so a real engine runs on a CPU machine as
the recorder needs it, with nothing asked of the user (no ``sitecustomize``, no exported variables).

- ``ENVIRONMENT``: variables every process of the run gets (``environment`` puts them over the caller's):
  ``VLLM_HOST_IP`` / ``VLLM_LOOPBACK_IP`` = 127.0.0.1 (else the engines' message queues bind the machine's
  external address); ``VLLM_CPU_OMP_THREADS_BIND=nobind`` (else every DP engine binds its OpenMP threads
  to core 0); ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` (``collective_rpc`` with a Python function, the
  workload's RPC body, is pickled); no usage statistics and no hub access (``HF_HUB_OFFLINE``: the model
  is a local ``config.json`` with dummy weights, nothing is downloaded).
- ``keep_uniprocess_executor``: ``CpuPlatform.check_and_update_config`` silently turns
  ``distributed_executor_backend="uni"`` into ``"mp"``; with ``mp`` the worker, and with it the DP
  all-reduce of every forward (``dp_utils._run_ar``), runs in a process of its own that the recorder's
  actor ``rank:N`` does not cover. The patch restores ``uni`` after the platform hook when the engine
  arguments asked for it, so the engine core and its worker are one process.
- ``keep_async_scheduling``: the same hook sets ``scheduler_config.async_scheduling = False`` ("async
  scheduling is not required on CPU"); the patch restores it when the engine arguments asked for it
  (``async_scheduling=True``). vLLM's CPU worker already replaces CUDA streams and events by no-ops
  (``vllm/v1/worker/cpu/shm.py``), so the ``AsyncScheduler``, the engine's batch queue and the V1 runner's
  async output path then run unchanged. Nothing changes for arguments that leave it unset.

- ``stub_cuda_streams``: only where ``STUB_STREAMS_ENVIRONMENT`` is ``1`` (the pp-broadcast check sets it
  for releases in ``pipeline.ASYNC_WITH_STUBBED_STREAMS``, 0.21.0): that release's CPU runner replaces
  ``torch.cuda.Stream`` and ``torch.Event`` only while it is built (``cpu_model_runner._torch_cuda_wrapper``),
  and its async output path (``AsyncGPUModelRunnerOutput``) then calls ``torch.cuda.current_stream()``,
  ``torch.cuda.stream(...)``, ``Stream.wait_stream`` and a fresh ``torch.Event()`` at every sampled step,
  which fail without a CUDA driver. The stub makes them no-ops for the whole process (``StubStream``,
  ``StubEvent``): on the CPU every tensor operation has finished when it returns, so waiting on a stream or
  an event has nothing to wait for, and the V1 runner's async path (including the PP sampled-token
  broadcast) runs unchanged.

``apply_in_process()`` does all of this in the process that calls it (the variables for what it starts, the
patches for what it configures); ``lockstep.real_vllm.driver`` calls it at import, which is how every
process vLLM spawns gets it (see there). Nothing here imports vLLM or torch before it is called.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

ENVIRONMENT: Mapping[str, str] = {
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_LOOPBACK_IP": "127.0.0.1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
UNIPROCESS = "uni"
STUB_STREAMS_ENVIRONMENT = "LOCKSTEP_VLLM_STUB_CUDA_STREAMS"  # "1": stub_cuda_streams in every process


def environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with ``ENVIRONMENT`` over it."""
    result = dict(os.environ if base is None else base)
    result.update(ENVIRONMENT)
    return result


def keep_uniprocess_executor(platform_class: Any) -> Callable[[], None]:
    """Wrap ``platform_class.check_and_update_config`` (a classmethod taking a ``VllmConfig``) so that a
    config that asked for the ``uni`` executor still has it afterwards; returns the function undoing it."""
    saved = vars(platform_class).get("check_and_update_config")
    original = platform_class.check_and_update_config  # bound to the class

    @functools.wraps(original)
    def check_and_update_config(cls: Any, vllm_config: Any) -> Any:
        parallel_config = vllm_config.parallel_config
        asked = parallel_config.distributed_executor_backend
        result = original(vllm_config)
        if asked == UNIPROCESS and parallel_config.distributed_executor_backend != UNIPROCESS:
            parallel_config.distributed_executor_backend = UNIPROCESS
        return result

    platform_class.check_and_update_config = classmethod(check_and_update_config)

    def undo() -> None:
        if saved is None:
            delattr(platform_class, "check_and_update_config")
        else:
            platform_class.check_and_update_config = saved

    return undo


def keep_async_scheduling(platform_class: Any) -> Callable[[], None]:
    """Wrap ``platform_class.check_and_update_config`` so that a config that asked for async scheduling
    (``scheduler_config.async_scheduling`` True) still has it afterwards; returns the function undoing it."""
    saved = vars(platform_class).get("check_and_update_config")
    original = platform_class.check_and_update_config  # bound to the class

    @functools.wraps(original)
    def check_and_update_config(cls: Any, vllm_config: Any) -> Any:
        scheduler_config = vllm_config.scheduler_config
        asked = scheduler_config.async_scheduling
        result = original(vllm_config)
        if asked is True and not scheduler_config.async_scheduling:
            scheduler_config.async_scheduling = True
        return result

    platform_class.check_and_update_config = classmethod(check_and_update_config)

    def undo() -> None:
        if saved is None:
            delattr(platform_class, "check_and_update_config")
        else:
            platform_class.check_and_update_config = saved

    return undo


class StubEvent:
    """A ``torch.Event`` / ``torch.cuda.Event`` that has always happened (the CPU runs every operation to
    its end before returning)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record(self, *args: Any, **kwargs: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait(self, *args: Any, **kwargs: Any) -> None:
        pass

    def query(self) -> bool:
        return True


class StubStream:
    """A ``torch.cuda.Stream`` with nothing queued on it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> StubEvent:
        return event if isinstance(event, StubEvent) else StubEvent()

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


def _cpu_model_runner() -> Any:
    """vLLM's ``vllm.v1.worker.cpu_model_runner`` module, or None where the release has none."""
    try:
        import vllm.v1.worker.cpu_model_runner as module  # type: ignore[import-not-found]
    except ImportError:
        return None
    return module


def stub_cuda_streams(torch_module: Any, cpu_model_runner: Any = None) -> Callable[[], None]:
    """Replace ``torch_module``'s CUDA streams and events by no-ops (``StubStream``, ``StubEvent``,
    ``current_stream``, the ``stream`` context) and, in ``cpu_model_runner`` (vLLM's module), the
    ``_torch_cuda_wrapper`` that builds the runner with placeholders lacking ``wait_stream`` by one that
    leaves the stubs in place; returns the function restoring them."""
    cuda = torch_module.cuda
    saved = [
        (torch_module, "Event", torch_module.Event),
        (cuda, "Event", cuda.Event),
        (cuda, "Stream", cuda.Stream),
        (cuda, "current_stream", cuda.current_stream),
        (cuda, "stream", cuda.stream),
    ]
    if cpu_model_runner is not None and hasattr(cpu_model_runner, "_torch_cuda_wrapper"):
        saved.append((cpu_model_runner, "_torch_cuda_wrapper", cpu_model_runner._torch_cuda_wrapper))
        cpu_model_runner._torch_cuda_wrapper = contextlib.nullcontext
    torch_module.Event = StubEvent
    cuda.Event = StubEvent
    cuda.Stream = StubStream
    cuda.current_stream = lambda *args, **kwargs: StubStream()
    cuda.stream = lambda *args, **kwargs: contextlib.nullcontext()

    def undo() -> None:
        for owner, name, value in saved:
            setattr(owner, name, value)

    return undo


def apply_in_process() -> Callable[[], None]:
    """Apply ``ENVIRONMENT``, ``keep_uniprocess_executor``, ``keep_async_scheduling`` and, where
    ``STUB_STREAMS_ENVIRONMENT`` is ``1``, ``stub_cuda_streams`` to this process (imports vLLM's CPU
    platform); returns the function undoing the patches (the variables stay)."""
    os.environ.update(ENVIRONMENT)
    from vllm.platforms.cpu import CpuPlatform  # type: ignore[import-not-found]

    undo_executor = keep_uniprocess_executor(CpuPlatform)
    undo_scheduling = keep_async_scheduling(CpuPlatform)
    undo_streams: Callable[[], None] = lambda: None  # noqa: E731
    if os.environ.get(STUB_STREAMS_ENVIRONMENT) == "1":
        import torch

        undo_streams = stub_cuda_streams(torch, _cpu_model_runner())

    def undo() -> None:
        undo_streams()
        undo_scheduling()
        undo_executor()

    return undo


__all__ = [
    "ENVIRONMENT",
    "STUB_STREAMS_ENVIRONMENT",
    "UNIPROCESS",
    "StubEvent",
    "StubStream",
    "apply_in_process",
    "environment",
    "keep_async_scheduling",
    "keep_uniprocess_executor",
    "stub_cuda_streams",
]
