"""The process that runs real vLLM for ``lockstep vllm check``: ``python -P -m lockstep.real_vllm.driver SPEC``.

**Every vLLM process gets lockstep's settings and recorder.** vLLM starts its engine cores and the DP
coordinator with ``multiprocessing``'s ``spawn`` (the CPU platform forces it), and a spawned process
imports the parent's main module before it unpickles its target: this module, as ``__mp_main__``. Its
import therefore calls ``prepare_process()`` in the driver and in every process vLLM spawns:
``settings.apply_in_process()`` (the environment, the ``uni`` executor kept) and, while
``LOCKSTEP_TRACE_DIR`` is set, the recorder of the protocol ``LOCKSTEP_VLLM_PROTOCOL`` names
(``RECORDERS``: ``vllm_pp_broadcast`` for ``pp-broadcast``, ``vllm_computed_tokens`` for ``computed-tokens``,
``vllm_async_placeholders`` for ``async-placeholders``, else ``vllm_dp_pause``; its ``install_vllm()``: the
release's recording, patch targets checked). Nothing is asked of the user's environment (no
``sitecustomize``, no ``PYTHONPATH``).

SPEC is a JSON file written by ``lockstep.real_vllm.check``: the protocol, the scenario (a dp-pause
``Scenario``, a pp-broadcast ``PipelineScenario``, a computed-tokens ``SchedulingScenario`` or an
async-placeholders ``PlaceholderScenario``, run by ``workload``, ``pipeline``, ``scheduling`` or
``placeholders``), the model directory, the version the check detected and where to write the status.
The status file (JSON, rewritten at each phase) says how far the run got (``phase``), the vLLM version the
driver imported, and at the end the ``outcome`` with the client's timeline, or the error. Exit codes: 0 the
scenario completed, 2 refused (a release no recording covers, a missing patch target, another vLLM than the
check detected), 3 the scenario failed in vLLM (an exception: in the status file and on stderr).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

EXIT_COMPLETED, EXIT_REFUSED, EXIT_FAILED = 0, 2, 3
PROTOCOL_ENVIRONMENT = "LOCKSTEP_VLLM_PROTOCOL"  # the protocol whose recorder every process installs (dp-pause)
RECORDERS = {  # protocol -> the module whose install_vllm() records it (and whose PROFILE replay assumes)
    "dp-pause": "lockstep.instrumentation.vllm_dp_pause",
    "pp-broadcast": "lockstep.instrumentation.vllm_pp_broadcast",
    "computed-tokens": "lockstep.instrumentation.vllm_computed_tokens",
    "async-placeholders": "lockstep.instrumentation.vllm_async_placeholders",
}
_prepared = False


def prepare_process() -> None:
    """lockstep's settings and, when recording, the release's recorder, in this process (once)."""
    global _prepared
    if _prepared:
        return
    from lockstep import record
    from lockstep.real_vllm import settings

    settings.apply_in_process()
    if record.recording_enabled():
        import importlib

        recorder = RECORDERS.get(os.environ.get(PROTOCOL_ENVIRONMENT, ""), RECORDERS["dp-pause"])
        importlib.import_module(recorder).install_vllm()
    _prepared = True


class Status:
    """The status file: rewritten whole at every change (``lockstep.traces.output.write_atomically``: a
    fresh temporary file, then a rename), so a reader never sees half."""

    def __init__(self, path: Path) -> None:
        self.path, self.started = path, time.monotonic()
        self.values: dict[str, Any] = {"phase": "importing vLLM", "pid": os.getpid()}
        self.write()

    def update(self, **values: Any) -> None:
        self.values.update(values, seconds=round(time.monotonic() - self.started, 3))
        self.write()

    def write(self) -> None:
        from lockstep.traces.output import write_atomically

        text = json.dumps(self.values) + "\n"
        write_atomically(self.path, lambda file: file.write(text))


def main(arguments: list[str]) -> int:
    from lockstep.instrumentation.vllm_releases import MissingPatchTarget, UnsupportedRelease
    from lockstep.real_vllm.scenarios import Scenario
    from lockstep.real_vllm.workload import drive

    spec = json.loads(Path(arguments[0]).read_text(encoding="utf-8"))
    status = Status(Path(spec["status"]))
    try:
        import vllm  # type: ignore[import-not-found]

        version = str(vllm.__version__)
        status.update(phase="installing lockstep's settings and recorder", version=version)
        if version != spec["version"]:
            raise UnsupportedRelease(f"the driver imported vLLM {version}, but the check detected {spec['version']}")
        prepare_process()
    except (UnsupportedRelease, MissingPatchTarget) as error:
        status.update(phase="refused", outcome="refused", error=str(error))
        sys.stderr.write(f"lockstep: {error}\n")
        return EXIT_REFUSED

    def noted(phase: str) -> None:
        status.update(phase=phase)

    try:
        if spec.get("protocol") == "pp-broadcast":
            from lockstep.real_vllm import pipeline

            chosen = pipeline.PipelineScenario.from_json(spec["scenario"])
            timeline = pipeline.drive(Path(spec["model"]), chosen, noted)
        elif spec.get("protocol") == "computed-tokens":
            from lockstep.real_vllm import scheduling

            scheduled = scheduling.SchedulingScenario.from_json(spec["scenario"])
            timeline = scheduling.drive(Path(spec["model"]), scheduled, noted)
        elif spec.get("protocol") == "async-placeholders":
            from lockstep.real_vllm import placeholders

            tracked = placeholders.PlaceholderScenario.from_json(spec["scenario"])
            timeline = placeholders.drive(Path(spec["model"]), tracked, noted)
        else:
            timeline = asyncio.run(drive(Path(spec["model"]), Scenario.from_json(spec["scenario"]), noted))
    except BaseException as error:  # vLLM's own failure (EngineDeadError, a timeout): the check reports it
        status.update(
            phase="failed",
            outcome="failed",
            error=f"{type(error).__name__}: {error}",
            traceback="".join(traceback.format_exception(error)),
        )
        traceback.print_exc()
        return EXIT_FAILED
    status.update(phase="done", outcome="completed", timeline=timeline.to_json())
    return EXIT_COMPLETED


if __name__ == "__mp_main__":  # a process vLLM spawned: lockstep's settings and recorder before its target runs
    prepare_process()
elif __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
