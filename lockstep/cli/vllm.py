"""The ``vllm check`` command of ``lockstep``: a real vLLM checked against its release's model.

``lockstep vllm check PROTOCOL [--scenario S] [--seed N] [--variant V] [--trace-dir D] [--timeout S]
[--model-file F] [--vllm-source PATH] [--json]`` detects the installed vLLM (``lockstep.real_vllm.releases``),
with ``--vllm-source`` lays the user's changed files over it (``lockstep.real_vllm.source_overlay``: refused,
exit 2, where compiled parts or files the protocol does not mirror differ), runs the scenario on it with
every actor recorded and replays the recording (``lockstep.real_vllm.check.run_check``) against the
release's variant or ``--model-file``'s protocol (an overlay, say); this module
parses, holds the trace folder, prints progress and the verdict on stderr, and with ``--json`` one
object on stdout (``lockstep/schemas/vllm-check.schema.json``). Exit codes: 0 conforms; 1 diverges or
violated; 2 usage (an unknown protocol, scenario or variant, no vLLM, a release no recording covers, a
trace folder in use or not empty); 3 inconclusive (the real run failed, hung past ``--timeout`` or its
recorder stopped; the replay lacks evidence); 4 the driver was killed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import Any

from lockstep.cli.failures import usage_error
from lockstep.cli.invocation import clock
from lockstep.traces.output import DirectoryClaim, claim_directory, claim_new_directory, safe_name, write_stdout

SCHEMA_VERSION = 1  # of vllm check's --json object
CANDIDATES_SHOWN = 3


def _not_empty(folder: Path) -> str | None:
    return "is not empty; give an empty or new directory" if any(folder.iterdir()) else None


def _trace_dir(arguments: argparse.Namespace, label: str) -> DirectoryClaim:
    """``--trace-dir``, or the first free ``lockstep-out/vllm-check-<label>[-N]``, held by this process."""
    from lockstep.traces.output import OutputError

    if arguments.trace_dir is not None:
        try:
            return claim_directory(arguments.trace_dir, _not_empty)
        except OutputError as error:
            raise OutputError(f"--trace-dir {error}") from None
    return claim_new_directory(Path("lockstep-out") / f"vllm-check-{label}", _not_empty)


def _say(console: Any, text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def command_vllm_check(arguments: argparse.Namespace, console: Any) -> int:
    """Check the installed vLLM (see the module doc); the exit code."""
    from lockstep.models import get_protocol
    from lockstep.real_vllm.check import DEFAULT_TIMEOUT, check_protocol, release_variant, run_check
    from lockstep.real_vllm.releases import detect

    timer = clock(arguments)
    source_folder = contextlib.ExitStack()  # holds --vllm-source's overlay folder for the run
    try:
        check_protocol(arguments.protocol)
        _scenario(arguments.protocol, arguments.scenario, arguments.seed)  # an unknown name before vLLM is looked for
        release = detect()
        interval = release.recording.default_sync_interval
        chosen = _scenario(arguments.protocol, arguments.scenario, arguments.seed, interval, release.version)
        modelled_by = release_variant(arguments.protocol, release)
        model = _model_file(arguments)
        variant = (
            (modelled_by if model is None else model.default_variant)
            if arguments.variant is None
            else (model or get_protocol(arguments.protocol)).variant(arguments.variant).name
        )
        overlay = _vllm_source(arguments, release.version, source_folder)  # refused before any trace folder
        claim = _trace_dir(arguments, safe_name(arguments.protocol, release.version))
    except ValueError as error:  # UsageError, UnsupportedRelease, NotInstalled, OutputError, unknown names
        source_folder.close()
        return usage_error(console, str(error), arguments)
    with source_folder, claim as folder:
        if overlay is not None:
            _say(console, f"vllm source {overlay.describe()}")
        _say(
            console,
            f"vllm check {arguments.protocol}: vLLM {release.version} is modelled by {modelled_by}"
            + (f" (judged by {variant})" if variant != modelled_by else "")
            + f"; scenario {chosen.name} (seed {chosen.seed}): {_describe(chosen)}; recording into {folder.resolve()}",
        )
        result = run_check(
            arguments.protocol,
            release,
            chosen,
            folder,
            variant=variant,
            timeout=timer.within(DEFAULT_TIMEOUT),
            python_path=None if overlay is None else overlay.root,
            model=model,
        )
    _render(console, result)
    if arguments.json:
        write_stdout(json.dumps({"schema_version": SCHEMA_VERSION, **result.to_json()}) + "\n")
    code: int = result.exit_code
    return code


def _model_file(arguments: argparse.Namespace) -> Any:
    """``--model-file``: the protocol it defines (named PROTOCOL), the recording's judge; None without it."""
    if getattr(arguments, "model_file", None) is None:
        return None
    from lockstep.cli.listing import selected_protocols

    (model,) = selected_protocols(arguments)
    return model


def _vllm_source(arguments: argparse.Namespace, release: str, folders: contextlib.ExitStack) -> Any:
    """``--vllm-source``: the user's files laid over the installed vLLM (``source_overlay``) in a private
    folder ``folders`` removes after the run; None without the option, ``SourceRefused`` where it is refused."""
    source = getattr(arguments, "vllm_source", None)
    if source is None:
        return None
    from lockstep.lifetime import temporary_directory
    from lockstep.real_vllm.source_overlay import installed_package, prepare

    into = folders.enter_context(temporary_directory("lockstep-vllm-source-"))
    return prepare(arguments.protocol, release, installed_package(), Path(source), into)


def _scenario(
    protocol: str, name: str | None, seed: int, sync_interval: int | None = None, release: str | None = None
) -> Any:
    """The protocol's scenario ``name`` (default: its default) with ``seed`` (dp-pause's aimed at ``sync_interval``,
    the installed release's; default 0.30.0's; pp-broadcast's with async scheduling where ``release`` runs it,
    ``pipeline.ASYNC_WITH_STUBBED_STREAMS``); ValueError for an unknown name."""
    if protocol == "pp-broadcast":
        from lockstep.real_vllm import pipeline

        asynchronous = release in pipeline.ASYNC_WITH_STUBBED_STREAMS
        return pipeline.scenario(name or pipeline.DEFAULT_SCENARIO, seed, asynchronous)
    if protocol == "computed-tokens":
        from lockstep.real_vllm import scheduling

        return scheduling.scenario(name or scheduling.DEFAULT_SCENARIO, seed)
    if protocol == "async-placeholders":
        from lockstep.real_vllm import placeholders

        return placeholders.scenario(name or placeholders.DEFAULT_SCENARIO, seed)
    from lockstep.real_vllm.scenarios import DEFAULT_SCENARIO, scenario

    if sync_interval is None:
        return scenario(name or DEFAULT_SCENARIO, seed)
    return scenario(name or DEFAULT_SCENARIO, seed, sync_interval)


def _describe(chosen: Any) -> str:
    if hasattr(chosen, "describe"):  # a pp-broadcast scenario says what it is
        return str(chosen.describe())
    late = f", {chosen.late_requests} more while {chosen.late_phase}" if chosen.late_requests else ""
    timing = " after a first token" if chosen.pause_after_first_token else ""
    cycles = f" ({chosen.cycles} cycles)" if chosen.cycles > 1 else ""
    return (
        f"{chosen.requests} requests of {chosen.max_tokens} tokens (DP ranks {list(chosen.ranks)}), "
        f"pause ({chosen.pause_mode}){timing}, collective_rpc, resume{cycles}{late}"
    )


def _render(console: Any, result: Any) -> None:
    """The run, the replay's verdict (the event, its reason and candidates on a divergence), the goals."""
    run = result.run
    _say(console, f"run: {run.outcome} in {run.seconds:.1f} s" + (f" ({run.message})" if run.message else ""))
    for failure in result.recorder_failures:
        _say(
            console, f"recorder of {failure.get('actor', '?')} stopped: {failure.get('error', '?')} ({failure['file']})"
        )
    replay = result.replay or {}
    if replay:
        coverage = replay.get("coverage", {})
        actors = ", ".join(f"{actor} {count}" for actor, count in coverage.get("events_per_actor", {}).items())
        _say(console, f"replay against {replay.get('model')}: {replay.get('verdict')}; events per actor: {actors}")
        explanation = replay.get("explanation") or {}
        if replay.get("verdict") in ("diverges", "violated"):
            _render_divergence(console, replay, explanation)
    elif result.replay_error:
        _say(console, f"replay: not possible ({result.replay_error})")
    goals = result.to_json()["goals"]
    kinds = ", ".join(f"{kind} {entry['reached']}/{entry['total']}" for kind, entry in goals["by_kind"].items())
    if goals["total"]:
        _say(console, f"model goals the real run reached: {goals['reached']} of {goals['total']} ({kinds})")
    colour = {"conforms": "green", "inconclusive": "yellow", "refused": "yellow"}.get(result.verdict, "red")
    reason = f": {result.reason}" if result.reason else ""
    console.print(f"[bold {colour}]{result.verdict}[/bold {colour}]", end="", highlight=False)
    _say(console, reason)
    _say(console, f"traces: {result.trace_dir.resolve()} (vLLM's output: {Path(run.log).name})")


def _render_divergence(console: Any, replay: dict[str, Any], explanation: dict[str, Any]) -> None:
    event = explanation.get("event") or {}
    if replay.get("verdict") == "violated":
        _say(console, f"  {replay.get('property')} fails after event {replay.get('event')}")
        return
    where = f"{explanation.get('file')}:{explanation.get('line')}"
    _say(
        console,
        f"  event {replay.get('event')} ({where}): {event.get('actor')} {event.get('action')} "
        f"{json.dumps(event.get('args', {}))}",
    )
    _say(console, f"  {explanation.get('reason', '')}")
    candidates = explanation.get("candidates", [])
    for number, candidate in enumerate(candidates[:CANDIDATES_SHOWN], start=1):
        _say(console, f"  candidate {number} of {explanation.get('candidate_count')}:")
        for why in candidate.get("why", []):
            _say(console, f"    - {why}")
        state = ", ".join(f"{name}={value}" for name, value in candidate.get("state", {}).items())
        _say(console, f"    state: {state}")
    _say(console, f"  longest conforming prefix: {replay.get('longest_conforming_prefix')} events")
