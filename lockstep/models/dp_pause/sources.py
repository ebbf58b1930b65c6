"""Where the vLLM functions a dp-pause action stands for differ by variant.

Each action names the v0.21.0 source it mirrors (``post-fix``, read from the v0.21.0 wheel) at its
definition (``mirrors=`` in ``engine.py``, ``coordinator.py``, ``client.py``); counterexamples
show it with every step. This table gives the v0.20.0 wheel's (``pre-fix``) where a function
differs, and the lines the mutants change; ``model.build`` applies it with ``machine.mirror``.
"""

from __future__ import annotations

from lockstep.models.dp_pause.engine import UTILITY
from lockstep.models.dp_pause.state import IGNORE_WHILE_PAUSED, NO_LOCAL_WAKEUP, Variant

# v0.20.0: single-phase pause, MAX finish-sync, resume that tells the coordinator.
PRE_FIX_SOURCES: dict[str, str] = {
    "handle_start_wave": "DPEngineCoreProc._handle_client_request(START_DP_WAVE)",
    "handle_pause": UTILITY + "EngineCoreProc.pause_scheduler (None at once if not has_work())",
    "handle_resume": UTILITY + "DPEngineCoreProc.resume_scheduler (start_wave if idle with requests)",
    "finish_sync": "ParallelConfig.has_unfinished_dp returns → DPEngineCoreProc.run_busy_loop "
    "(wave end: wave_complete)",
}


def variant_sources(variant: Variant) -> dict[str, str]:
    """The sources of ``variant`` that differ from v0.21.0's (the mutants differ from their base only
    where they change a line)."""
    table = {} if variant.fixed else dict(PRE_FIX_SOURCES)
    if variant.name == IGNORE_WHILE_PAUSED:
        table["handle_start_wave"] = (
            "DPEngineCoreProc._handle_client_request(START_DP_WAVE) (dropped while paused: #36608/#38009)"
        )
    if variant.name == NO_LOCAL_WAKEUP:
        table["handle_add"] = "_handle_client_request(ADD) → DPEngineCoreProc.add_request (stale wave: start_wave only)"
    return table
