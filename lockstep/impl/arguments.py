"""The arguments of a runtime run, shared by ``lockstep run`` and ``python -m lockstep.impl.rank``.

``add_run_arguments`` declares them on a parser; ``config_from_arguments`` checks them and builds
the ``RunConfig`` (``RunUsageError`` names what is wrong): the runtime's ranges, and then the
model's (``check_model_bounds``: a setting the runtime takes but the model of the run's trace
header does not is refused before any process starts). ``setting_values`` reads ``--set`` texts
(``lockstep fuzz --impl`` too). Imports no torch.
"""

from __future__ import annotations

import argparse
import importlib
import math
from pathlib import Path
from typing import Any

from lockstep.impl.protocols import RUNTIME_PROTOCOLS, RuntimeProtocol, Setting
from lockstep.impl.runtime import RunConfig
from lockstep.models import POST_FIX, PRE_FIX


def _bounded(kind: type, low: float, high: float | None = None) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value

    return parse


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("protocol", metavar="PROTOCOL", help=f"the protocol to run ({', '.join(RUNTIME_PROTOCOLS)})")
    parser.add_argument(
        "--variant", default=POST_FIX, help=f"{PRE_FIX}, {POST_FIX} or a mutant the protocol runs (default: {POST_FIX})"
    )
    parser.add_argument(
        "--scenario", help="the protocol's scenario (default: its first; `lockstep run --help` lists them)"
    )
    parser.add_argument("--ranks", type=_bounded(int, 1, 8), help="rank processes (default and range: the protocol's)")
    for option, setting in SHORTHANDS.items():
        parser.add_argument(
            option,
            metavar="N",
            help=f"--set {setting}=N, for the protocols with that setting ({_owners(setting)})",
        )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        dest="settings",
        help="a protocol setting (repeatable); every protocol's settings: " + _settings_help(),
    )
    parser.add_argument(
        "--backend",
        choices=("gloo", "nccl"),
        default="gloo",
        help="worker-level groups' backend (the engine-level group is always gloo)",
    )
    parser.add_argument("--seed", type=_bounded(int, 0), default=0, help="seed of the choice source (default 0)")
    parser.add_argument(
        "--hang-timeout",
        type=_bounded(float, 0.5),
        default=10.0,
        metavar="SECONDS",
        help="seconds blocked in one collective or receive that count as a hang (default 10)",
    )
    parser.add_argument("--trace-dir", type=Path, metavar="DIR", help="write one trace file per process here")
    parser.add_argument(
        "--choices",
        type=Path,
        metavar="FILE",
        help="feed the choices from this JSON Lines file (from --json's choices), then the seed",
    )
    parser.add_argument(
        "--flight-recorder",
        action="store_true",
        help="turn on torch's flight recorder; on a hang each rank dumps it beside its trace as "
        "rank-<r>.flight-recorder (needs --trace-dir; check with lockstep replay --flight-recorder DIR)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def _settings_help() -> str:
    parts = [
        f"{protocol.name}: "
        + ", ".join(
            f"{name} ({setting.help}; {setting.low}..{setting.high}, default {setting.default})"
            for name, setting in protocol.settings.items()
        )
        for protocol in RUNTIME_PROTOCOLS.values()
        if protocol.settings
    ]
    return "; ".join(parts) or "none"


def _owners(setting: str) -> str:
    return ", ".join(protocol.name for protocol in RUNTIME_PROTOCOLS.values() if setting in protocol.settings)


def _shorthands(protocol: RuntimeProtocol, arguments: argparse.Namespace) -> list[str]:
    """``--requests N`` and ``--sync-interval K`` as ``--set`` texts; a protocol without the setting is an error."""
    texts = []
    for option, setting in SHORTHANDS.items():
        value = getattr(arguments, setting, None)
        if value is None:
            continue
        if setting not in protocol.settings:
            known = ", ".join(protocol.settings) or "none"
            raise RunUsageError(f"{option}: {protocol.name} has no setting {setting!r} (its settings: {known})")
        texts.append(f"{setting}={value}")
    return texts


def setting_values(protocol: RuntimeProtocol, texts: list[str]) -> dict[str, int]:
    """The protocol's settings with ``NAME=VALUE`` texts over their defaults (``RunUsageError``: an
    unknown name, a value that is no integer or outside the runtime's range)."""
    values = {name: setting.default for name, setting in protocol.settings.items()}
    for text in texts:
        name, equals, value = text.partition("=")
        if not equals:
            raise RunUsageError(f"--set {text!r}: expected NAME=VALUE")
        setting = protocol.settings.get(name)
        if setting is None:
            known = ", ".join(protocol.settings) or "none"
            raise RunUsageError(f"--set {name}: {protocol.name} has no setting {name!r} (its settings: {known})")
        try:
            number = int(value)
        except ValueError:
            raise RunUsageError(f"--set {name}={value}: not an integer") from None
        if not setting.low <= number <= setting.high:
            raise RunUsageError(f"--set {name}={value}: must be between {setting.low} and {setting.high}")
        values[name] = number
    return values


SHORTHANDS = {"--requests": "requests", "--sync-interval": "sync_interval"}  # option -> protocol setting


class RunUsageError(ValueError):
    """Arguments that name something the runtime cannot run."""


def config_from_arguments(arguments: argparse.Namespace) -> RunConfig:
    """The RunConfig the arguments describe (RunUsageError if they name something unknown)."""
    protocol = RUNTIME_PROTOCOLS.get(arguments.protocol)
    if protocol is None:
        raise RunUsageError(
            f"the runtime has no protocol {arguments.protocol!r}; it runs: {', '.join(RUNTIME_PROTOCOLS)}"
        )
    if arguments.variant not in protocol.variants:
        raise RunUsageError(
            f"{protocol.name} has no runtime variant {arguments.variant!r}; choose one of "
            f"{', '.join(protocol.variants)}"
        )
    scenario = arguments.scenario or protocol.scenarios[0]
    if scenario not in protocol.scenarios:
        raise RunUsageError(
            f"unknown scenario {scenario!r} for {protocol.name}; choose one of {', '.join(protocol.scenarios)}"
        )
    ranks = protocol.default_ranks if arguments.ranks is None else arguments.ranks
    fewest, most = protocol.ranks
    if not fewest <= ranks <= most:
        raise RunUsageError(f"{protocol.name} runs {fewest} to {most} ranks, got --ranks {ranks}")
    texts = [*_shorthands(protocol, arguments), *(getattr(arguments, "settings", None) or [])]
    extra: dict[str, Any] = dict(setting_values(protocol, texts))
    trace_dir = None
    if arguments.trace_dir is not None:
        folder = Path(arguments.trace_dir)
        if folder.exists() and not folder.is_dir():
            raise RunUsageError(f"--trace-dir {folder} is not a directory")
        if folder.is_dir() and any(folder.glob("*.jsonl")):
            raise RunUsageError(f"--trace-dir {folder} already holds *.jsonl files; give an empty or new directory")
        trace_dir = str(folder.resolve())
    choices = None
    if getattr(arguments, "choices", None) is not None:
        if not Path(arguments.choices).is_file():
            raise RunUsageError(f"--choices {arguments.choices}: no such file")
        choices = str(Path(arguments.choices).resolve())
    flight_recorder = bool(getattr(arguments, "flight_recorder", False))
    if flight_recorder and trace_dir is None:
        raise RunUsageError("--flight-recorder keeps each rank's dump beside its trace: give --trace-dir DIR")
    config = RunConfig(
        protocol=protocol.name,
        variant=arguments.variant,
        scenario=scenario,
        ranks=ranks,
        backend=arguments.backend,
        seed=arguments.seed,
        timeout=arguments.hang_timeout,
        trace_dir=trace_dir,
        choices=choices,
        flight_recorder=flight_recorder,
        extra=extra,
    )
    problem = protocol.validate(config) if protocol.validate is not None else None
    if problem is not None:
        raise RunUsageError(problem)
    check_model_bounds(protocol, config)
    return config


def check_model_bounds(protocol: RuntimeProtocol, config: RunConfig) -> None:
    """Refuse (``RunUsageError``) a run whose trace header would carry a model parameter outside the
    model's bounds: every process of it would fail at its first trace event. The message names the
    ``--set`` setting that put it there with the setting's range and the model's, or else the
    parameter, its value and the model's range."""
    from lockstep.models import get_protocol  # noqa: PLC0415 - the models load with the runtime's registry

    values = importlib.import_module(f"{protocol.package}.parameters").model_parameters(config)
    model = get_protocol(config.protocol)
    for spec in model.parameters:
        value = values.get(spec.name)
        if not isinstance(value, int) or isinstance(value, bool) or spec.range_problem(value) is None:
            continue
        bound = f"{spec.minimum}..{spec.maximum}" if spec.maximum is not None else f"at least {spec.minimum}"
        setting = protocol.settings.get(spec.name)
        if setting is not None and spec.name in config.extra:
            raise RunUsageError(
                f"--set {spec.name}={config.extra[spec.name]}: allowed {_allowed(setting, spec)} (the {model.name} "
                f"model bounds {spec.name} to {bound}; the runtime's setting: {setting.low}..{setting.high}, "
                f"{setting.help})"
            )
        given = ", ".join(f"{name}={number}" for name, number in config.extra.items()) or "none"
        raise RunUsageError(
            f"this run would record the {model.name} model's parameter {spec.name}={value}, outside its bounds "
            f"{bound} (scenario {config.scenario}, {config.ranks} ranks, settings: {given})"
        )


def _allowed(setting: Setting, spec: Any) -> str:
    """The values of ``setting`` within the range of the model parameter ``spec`` (a
    ``lockstep.spec.protocol.ParameterSpec``); those below the model's minimum may still be the
    setting's own markers, such as -1 for the scenario's value."""

    def span(low: int, high: int) -> str:
        return str(low) if low == high else f"{low}..{high}"

    high = setting.high if spec.maximum is None else min(setting.high, spec.maximum)
    inside = span(max(setting.low, spec.minimum), high)
    return inside if setting.low >= spec.minimum else f"{span(setting.low, spec.minimum - 1)} or {inside}"
