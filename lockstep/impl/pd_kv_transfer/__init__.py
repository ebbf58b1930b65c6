"""pd-kv-transfer in the reference runtime: a prefill engine (P, rank 0) and a decode engine (D,
rank 1) in real processes, mirroring ``lockstep/models/pd_kv_transfer/model.py`` (vLLM v0.29.0
pre-fix, v0.33.0 post-fix; the NIXL connector in pull mode). Each engine's scheduler and worker
act in its process; D's read of P's KV blocks is a real ``torch.distributed`` point-to-point
transfer of the block tensor (gloo on CPU, NCCL with ``--backend nccl``); the hand-off of
``kv_transfer_params``, D's notifications and D's lease release are real messages between the
processes. Faults (aborts, failed reads, lost and duplicated notifications, lease expiry) are
the run's choices within the model's budgets. ``blocks`` (block pools with generation-tagged
KV), ``link`` (the messages, the scripted order, the end of a run), ``engine`` (the loop every
engine runs), ``prefill`` and ``decode`` (the two engines), ``scenario`` (the faults each
scenario steers to), ``parameters`` (trace header), ``reproduction``, ``rank``. ``RUNTIME``
registers it with ``lockstep.impl.protocols``; this module imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockstep.impl.pd_kv_transfer.scenario import SCENARIOS
from lockstep.impl.protocols import RuntimeProtocol
from lockstep.models.pd_kv_transfer.model import POST_FIX, PRE_FIX

if TYPE_CHECKING:
    from lockstep.impl.runtime import RunConfig


def _problem(config: RunConfig) -> str | None:
    if config.ranks != 2:
        return "pd-kv-transfer runs 2 ranks: the prefill engine (rank 0) and the decode engine (rank 1)"
    return None


RUNTIME = RuntimeProtocol(
    name="pd-kv-transfer",
    package="lockstep.impl.pd_kv_transfer",
    variants=(PRE_FIX, POST_FIX),
    scenarios=SCENARIOS,
    ranks=(2, 2),
    default_ranks=2,
    validate=_problem,
    summary="prefill and decode engines: KV blocks pulled over torch.distributed, notifications, leases, faults",
    reproduction="lockstep.impl.pd_kv_transfer.reproduction",
    fuzz_scenario="abort",
)
