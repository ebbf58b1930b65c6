"""Broken copies of the dp-pause vLLM instrumentation, installed in a runtime run's processes by
``LOCKSTEP_INSTRUMENT=instrumentation_mutants:install`` to show the worked example's test can fail.

``LOCKSTEP_MUTANT`` picks the defect: ``skip-start-wave`` leaves every ``handle_start_wave`` event
out; ``wrong-wave`` reports ``current_wave`` one too high on ``handle_add``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from lockstep.instrumentation import vllm_dp_pause


def install(role: str) -> Callable[[], None]:
    undo = vllm_dp_pause.install_runtime(role)
    mutant = os.environ.get("LOCKSTEP_MUTANT")
    event = vllm_dp_pause.EngineTrace.event

    def skipping(self: vllm_dp_pause.EngineTrace, action: str, **overrides: Any) -> None:
        if action != "handle_start_wave":
            event(self, action, **overrides)

    def misreporting(self: vllm_dp_pause.EngineTrace, action: str, **overrides: Any) -> None:
        if action == "handle_add":
            overrides["current_wave"] = int(self.engine.current_wave) + 1
        event(self, action, **overrides)

    if mutant == "skip-start-wave":
        vllm_dp_pause.EngineTrace.event = skipping  # type: ignore[method-assign]
    elif mutant == "wrong-wave":
        vllm_dp_pause.EngineTrace.event = misreporting  # type: ignore[method-assign]
    return undo
