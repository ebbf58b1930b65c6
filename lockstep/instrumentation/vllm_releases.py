"""What a dp-pause recording of each vLLM release writes: the release-dependent half of ``vllm_dp_pause``.

A ``Recording`` says, for one vLLM release, which model variant its events are written for (the header's
``variant``; the release-to-variant table is the model's own, ``lockstep.models.dp_pause.releases.BISECTION``,
with 0.20.0 as ``pre-fix``), and how the patch turns what it sees into that variant's events:

- ``device_sync`` (v0.29.0 on): a pause completes in ``_notify_idle_state_callbacks`` →
  ``engine_idle_callback`` → ``EngineCore._finish_pause`` → ``collective_rpc("synchronize_device")``, the
  model's ``fire_idle_callbacks`` then ``synchronize_device`` (the reply); before, one ``notify_idle``.
- ``counter_from_one`` (v0.30.0 on): ``_has_global_unfinished_reqs`` syncs at step 1 of a wave and every
  ``dp_sync_interval`` steps, and ``run_busy_loop`` resets ``step_counter`` when a wave ends; the model keeps
  the counter as 1..interval (0 at a wave's start). Before, it syncs every 32nd step and the model keeps the
  counter modulo 32. ``sync_interval`` is then the engine's ``dp_sync_interval`` (0.32.0's default: 16),
  else 32.
- ``unrecorded``: the model's actions a patch cannot see (the header's ``unrecorded``): the coordinator
  (its wave state is one function's locals), the client's stats task reading a publication
  (``client_read_publication``, ``client_read_view`` in the later-release variants: applied inline in the
  ``run_engine_stats_update_task`` closure) and, in the later-release variants, ``device_idle`` (the device
  finishing a forward's kernels, which no CPU-side function marks).

``check_targets(recording)`` makes sure the installed vLLM has every class, method and module the patch
replaces or calls through (``VLLM_TARGETS``; ``MissingPatchTarget`` names the first one missing), before
anything is patched. ``recording_for(version)`` gives the recording of a release (``"0.32.0"``, ``"0.32.0+cpu"``);
``UnsupportedRelease`` names the releases covered when it has none: before 0.20.0 the models have no
variant, and 0.33.0's front end (no FIRST_REQ, ``pause_generation`` and ``resume_scheduler`` as new
actions) has no recorder yet. Imports only the standard library (the model's table and vLLM lazily).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

LEGACY_SYNC_INTERVAL = 32  # DPEngineCoreProc._has_global_unfinished_reqs before 0.30.0: every 32nd step
DEFAULT_DP_SYNC_INTERVAL = 16  # ParallelConfig.dp_sync_interval's default (0.30.0 on)
EARLY_UNRECORDED = ("coordinator", "client_read_publication")  # the v0.20.0 / v0.21.0 variants
LATER_UNRECORDED = ("coordinator", "client_read_view", "device_idle")  # the later-release variants
PRE_FIX_RELEASE = "0.20.0"  # dp-pause pre-fix: vLLM v0.20.0 (no pending_pause)
UNRECORDED_RELEASES = {"0.33.0": "its front end has no FIRST_REQ and new pause/resume actions: no recorder yet"}
VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)\.(\d+)")


ENGINE_METHODS = (
    "run_busy_loop",
    "_handle_client_request",
    "collective_rpc",
    "_notify_idle_state_callbacks",
    "_process_engine_step",
    "_has_global_unfinished_reqs",
    "_handle_shutdown",
    "resume_scheduler",
)  # the engine core's patched methods, in the order of their wrappers


class UnsupportedRelease(ValueError):
    """A vLLM release that no dp-pause recording covers (the message names the ones that are)."""


@dataclass(frozen=True)
class Recording:
    """How the dp-pause patch records one vLLM release (see the module doc)."""

    release: str  # "0.32.0": the release as the models' tables name it
    variant: str  # the dp-pause model variant the release stands for
    device_sync: bool = False  # v0.29.0 on: fire_idle_callbacks / synchronize_device, not notify_idle
    counter_from_one: bool = False  # v0.30.0 on: step 1 of a wave syncs; the counter is 1..dp_sync_interval
    unrecorded: tuple[str, ...] = EARLY_UNRECORDED

    def sync_interval(self, vllm_config: Any) -> int:
        """The engine all-reduce cadence of a run with ``vllm_config`` (an engine core's or the client's
        ``VllmConfig``): its ``parallel_config.dp_sync_interval`` from v0.30.0 on, else 32."""
        if self.counter_from_one:
            return int(vllm_config.parallel_config.dp_sync_interval)
        return LEGACY_SYNC_INTERVAL

    @property
    def default_sync_interval(self) -> int:
        """The cadence of an engine left at the release's defaults (a run's own is ``sync_interval``)."""
        return DEFAULT_DP_SYNC_INTERVAL if self.counter_from_one else LEGACY_SYNC_INTERVAL

    def step_counter(self, counter: int, interval: int) -> int:
        """vLLM's ``step_counter`` as the model keeps it: modulo the interval, or 1..interval (0 at a wave's start)."""
        if self.counter_from_one:
            return 0 if counter <= 0 else (counter - 1) % interval + 1
        return counter % interval


class MissingPatchTarget(RuntimeError):
    """A class, method or module the dp-pause patch needs is not in the installed vLLM (the message names it)."""


# Every vLLM name the patch replaces or calls through: module, attribute path; checked before patching.
VLLM_TARGETS = (
    *(("vllm.v1.engine.core", f"DPEngineCoreProc.{method}") for method in ENGINE_METHODS),
    ("vllm.config", "ParallelConfig.has_unfinished_dp"),
    ("vllm.v1.worker.dp_utils", "_run_ar"),
    ("vllm.v1.engine.core_client", "DPLBAsyncMPClient._send_input"),
    ("vllm.v1.engine.core_client", "DPLBAsyncMPClient._call_utility_async"),
    ("vllm.v1.engine.core_client", "DPLBAsyncMPClient.call_utility_async"),
)
POST_FIX_TARGETS = (("vllm.config", "ParallelConfig.sync_dp_state"),)  # the two-phase pause's consensus


def find_target(module_name: str, path: str, recorder: str = "dp-pause") -> Any:
    """The object ``module_name``.``path`` names; ``MissingPatchTarget`` naming the first missing part (and
    ``recorder``, the recorder that patches it)."""
    import importlib

    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise MissingPatchTarget(f"module {module_name} cannot be imported: {error}") from None
    walked = module_name
    for part in path.split(".") if path else ():
        if not hasattr(found, part):
            raise MissingPatchTarget(
                f"{walked}.{part} does not exist (the {recorder} recorder patches {module_name}.{path})"
            )
        found, walked = getattr(found, part), f"{walked}.{part}"
    return found


def check_targets(recording: Recording) -> None:
    """Every patch target of ``recording``'s release exists in the installed vLLM, else ``MissingPatchTarget``."""
    required = VLLM_TARGETS + (POST_FIX_TARGETS if recording.variant != "pre-fix" else ())
    for module_name, path in required:
        find_target(module_name, path)


def check_patch_targets(targets: tuple[tuple[str, str], ...], recorder: str) -> None:
    """Every ``(module, attribute path)`` of a recorder's ``targets`` exists in the installed vLLM, else
    ``MissingPatchTarget`` naming the first missing."""
    for module_name, path in targets:
        find_target(module_name, path, recorder=recorder)


def variant_for_release(model: Any, version: str) -> str:
    """The variant of ``model`` (a ``Protocol`` with a release table) that vLLM ``version`` stands for;
    ``UnsupportedRelease`` naming the covered releases for one the table lacks."""
    found = model.release_variant(release_number(version))
    if found is None:
        releases = [release for release, _ in model.release_table]
        raise UnsupportedRelease(
            f"vLLM {version}: the {model.name} models have no variant for it; they cover {releases[0]} to "
            f"{releases[-1]}"
        )
    name: str = found.name
    return name


def installed_recording() -> Recording:
    """The recording of the installed vLLM (``vllm.__version__``); ``UnsupportedRelease`` if none covers it."""
    import vllm  # type: ignore[import-not-found]

    return recording_for(str(vllm.__version__))


# lockstep's reference runtime has v0.21.0's shape and records the v0.20.0 / v0.21.0 variants by what it runs
RUNTIME_RECORDING = Recording("0.21.0", "post-fix")


def release_number(version: str) -> str:
    """``"0.32.0"`` for ``"0.32.0"``, ``"v0.32.0"``, ``"0.32.0+cpu"`` or ``"0.32.0rc1.dev3"``; UnsupportedRelease
    for a version that does not start with three numbers (a development tree's ``"dev"``)."""
    found = VERSION.match(version)
    if found is None:
        raise UnsupportedRelease(f"vLLM version {version!r} is not a release number (x.y.z)")
    return ".".join(str(int(part)) for part in found.groups())


def covered_releases() -> list[str]:
    """Every release a recording covers, oldest first."""
    from lockstep.models.dp_pause.releases import BISECTION

    return [PRE_FIX_RELEASE, *(release for release, _, _ in BISECTION if release not in UNRECORDED_RELEASES)]


def recording_for(version: str) -> Recording:
    """The recording of vLLM ``version`` (see the module doc); UnsupportedRelease names the covered releases."""
    from lockstep.models.dp_pause.releases import BISECTION, release_of

    release = release_number(version)
    if release == PRE_FIX_RELEASE:
        return Recording(release, "pre-fix")
    variants = {name: variant for name, variant, _ in BISECTION}
    covered = covered_releases()
    if release not in variants or release in UNRECORDED_RELEASES:
        reason = UNRECORDED_RELEASES.get(release, "the dp-pause models have no variant for it")
        raise UnsupportedRelease(
            f"vLLM {version}: {reason}; the dp-pause recorder covers {covered[0]} to {covered[-1]} "
            f"({', '.join(covered)})"
        )
    variant = variants[release]
    changes = release_of(variant)
    return Recording(
        release,
        variant,
        device_sync=changes.synchronizes_device,
        counter_from_one=changes.sync_at_step_one,
        unrecorded=LATER_UNRECORDED if changes.later else EARLY_UNRECORDED,
    )


__all__ = [
    "EARLY_UNRECORDED",
    "LATER_UNRECORDED",
    "LEGACY_SYNC_INTERVAL",
    "RUNTIME_RECORDING",
    "Recording",
    "UnsupportedRelease",
    "covered_releases",
    "recording_for",
    "release_number",
]
