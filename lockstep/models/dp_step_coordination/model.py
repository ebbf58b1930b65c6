"""dp-step-coordination: the collectives every data-parallel rank posts per engine step.

Mirrors vLLM **v0.33.0** (``post-fix``) and **v0.24.0** (``pre-fix``), the V1 model runner:
``vllm/v1/engine/core.py`` (``DPEngineCoreProc.run_busy_loop``, ``_has_global_unfinished_reqs``,
``EngineCore.step``, ``execute_dummy_batch``), ``vllm/v1/worker/dp_utils.py``
(``coordinate_batch_across_dp``), ``vllm/v1/worker/gpu_model_runner.py``
(``_determine_batch_execution_and_padding``, ``sample_tokens``, ``_dummy_run``) and
``vllm/v1/spec_decode/llm_base_proposer.py`` (``propose``, ``dummy_run``).

The story. DP ranks of a MoE model share the expert layers, so every engine step of every rank
is a forward whose collectives must line up with every other rank's: the all-reduce of
``coordinate_batch_across_dp`` (token counts, the ubatching vote, the cudagraph mode), then the
MoE all-to-alls. A rank with nothing to run steps anyway, with a dummy batch. Each rank decides
alone whether it has work, whether its batch fits the speculative drafter, and (from its step
counter) whether this iteration all-reduces the unfinished-requests flag. Two ranks that decide
differently post different sequences: the job hangs.

Actors: one per DP rank (``rank:N``, interchangeable: symmetry), in ``engine.py`` (the busy loop)
and ``worker.py`` (the collectives of a forward); ``state.py`` declares the state and the three
communicators; ``properties.py`` the properties and their sources; ``sources.py`` the earlier
releases' functions where they differ.

The variants differ in ``sample_tokens``: a rank whose batch does not fit the drafter
(``_input_fits_in_drafter`` false: ``max_seq_len + num_spec_tokens`` beyond the drafter's
``max_model_len``) skips the drafter in v0.24.0, while a peer that fits proposes and an idle peer's
dummy batch runs the drafter's dummy_run: the drafter's collectives face the next step's target
collectives (vLLM PR #40589, "[Bugfix] Fix dp mtp hang", first in the v0.25.0 wheel). v0.25.0 on
runs ``self.drafter.dummy_run(num_tokens=1)`` instead. And ``_has_global_unfinished_reqs`` syncs
every 32nd step up to v0.29.0; v0.30.0 on at step 1 and every ``dp_sync_interval``-th. The variant
``v0.29.0`` (releases 0.25.0-0.29.0) has the first fix and the old sync; ``releases.py`` maps every
release from 0.19.0 to 0.33.0.
"""

from __future__ import annotations

from collections.abc import Mapping

from lockstep.models.dp_step_coordination.engine import (
    add_request,
    end_iteration,
    execute_dummy_batch,
    execute_model,
    stop_rank,
)
from lockstep.models.dp_step_coordination.properties import add_properties, set_final
from lockstep.models.dp_step_coordination.releases import BISECTION
from lockstep.models.dp_step_coordination.sources import variant_sources
from lockstep.models.dp_step_coordination.state import POST_FIX, PRE_FIX, V0_29_0, declare
from lockstep.models.dp_step_coordination.worker import post_collective
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import InstanceSpec, ParameterSpec, Protocol, VariantSpec
from lockstep.spec.sorts import BOOL

__all__ = ["POST_FIX", "PRE_FIX", "PROTOCOL", "build"]


def build(variant: str, parameters: Mapping[str, int]) -> Machine:
    """The dp-step-coordination machine for ``variant`` at the given parameter values."""
    machine = Machine(f"dp-step-coordination/{variant}", hang_bound=parameters["hang_bound"])
    state = declare(machine, parameters)
    Rank = state.Rank
    machine.add(add_request, state, rank=Rank)
    machine.add(execute_model, state, variant, rank=Rank, fits=BOOL)
    machine.add(execute_dummy_batch, state, variant, rank=Rank)
    machine.add(post_collective, state, rank=Rank)
    machine.add(end_iteration, state, rank=Rank)
    if state.sizes.stops:
        machine.add(stop_rank, state, rank=Rank)
    machine.declare_symmetric(Rank)  # no rank has a role of its own in a step
    machine.mirror(variant_sources(variant))  # the release's functions where they differ from v0.33.0's
    set_final(machine, state)
    add_properties(machine, state)
    return machine


PROTOCOL = Protocol(
    name="dp-step-coordination",
    title="DP/EP ranks: the collectives every engine step posts",
    change="vLLM v0.25.0 (sample_tokens: the drafter's dummy_run when the batch does not fit it)",
    variants=(
        VariantSpec(
            PRE_FIX,
            "a rank whose batch does not fit the drafter skips the drafter's collectives",
            "vLLM v0.24.0",
        ),
        VariantSpec(
            V0_29_0,
            "the drafter's dummy_run for an overlong batch; the unfinished-requests sync every 32nd step",
            "vLLM v0.29.0",
        ),
        VariantSpec(POST_FIX, "every rank posts the drafter's collectives every step", "vLLM v0.33.0"),
    ),
    parameters=(
        ParameterSpec("ranks", 2, "DP ranks (each one engine core, one EP member)", minimum=2, maximum=4),
        ParameterSpec(
            "requests", 1, "requests the clients add, to any rank, while the wave runs", minimum=0, maximum=3
        ),
        ParameterSpec("steps", 1, "forward steps each request needs", minimum=1, maximum=3),
        ParameterSpec(
            "dp_sync_interval",
            2,
            "steps between unfinished-requests all-reduces (vLLM: 16; 32 before v0.30.0)",
            minimum=1,
            maximum=32,
        ),
        ParameterSpec("drafts", 1, "num_speculative_tokens of an EAGLE/MTP drafter (0: none)", minimum=0, maximum=3),
        ParameterSpec(
            "moe_drafter",
            1,
            "1: the drafter's layers are MoE (MTP) and post EP collectives; 0: a dense head",
            maximum=1,
        ),
        ParameterSpec(
            "overlong", 0, "1: a real step's batch may not fit the drafter's max_model_len", minimum=0, maximum=1
        ),
        ParameterSpec("stops", 0, "ranks that may stop (die or leave the busy loop) while the wave runs", maximum=1),
        ParameterSpec(
            "hang_bound", 16, "steps within which every posted collective must complete", minimum=1, maximum=64
        ),
    ),
    instances=(
        InstanceSpec(
            "seed",
            "two ranks, one request, one draft token: real and dummy steps line up",
            {},
            {PRE_FIX: "holds", V0_29_0: "holds", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "overlong-draft",
            "a batch beyond the drafter's max_model_len on one rank",
            {"overlong": 1},
            {PRE_FIX: "violated", V0_29_0: "holds", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "overlong-mtp",
            "three MTP draft tokens, two requests of two steps, three ranks, one overlong batch",
            {"ranks": 3, "requests": 2, "steps": 2, "drafts": 3, "overlong": 1, "dp_sync_interval": 3},
            {PRE_FIX: "violated", V0_29_0: "holds", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "overlong-eagle",
            "a dense EAGLE head (all-reduces only) and an overlong batch: the ranks block in different groups",
            {"moe_drafter": 0, "overlong": 1},
            {PRE_FIX: "violated", V0_29_0: "holds", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "sync-interval",
            "three ranks, two requests of three steps, dp_sync_interval 3, no drafter",
            {"ranks": 3, "requests": 2, "steps": 3, "drafts": 0, "dp_sync_interval": 3},
            {PRE_FIX: "holds", V0_29_0: "holds", POST_FIX: "holds"},
        ),
        InstanceSpec(
            "rank-stops",
            "a rank stops while the wave runs: its peers block in their next collective",
            {"stops": 1},
            {PRE_FIX: "violated", V0_29_0: "violated", POST_FIX: "violated"},
        ),
    ),
    build=build,
    rank_parameter="ranks",
    release_table=tuple((release, variant) for release, variant, _ in BISECTION),
)
