"""What every dp-pause process shares: the trace header's parameters and the per-process setup.

``SETTINGS`` are dp-pause's own run settings (``lockstep run dp-pause --requests N --sync-interval K``,
or ``--set requests=N``), kept in ``RunConfig.extra`` like every protocol's settings;
``DpPauseConfig`` is the run's config with them as attributes (``config.requests``), which
every dp-pause process reads its config as. ``model_parameters`` gives the header every parameter
the dp-pause model declares (its defaults, with the run's ranks, requests and sync_interval, and
max_wave large enough for the run, or a reproduced counterexample's own values), plus
the runtime's own bounds (scenario, seed, backend, timeout, channel capacities), so replay can
instantiate the model from the header. ``open_process`` opens one process's trace recorder,
status board and choice source. ``instrument(role)`` installs the instrumentation that
``LOCKSTEP_INSTRUMENT=module:function`` names, in every process of a run (the launcher passes
the environment on): ``function(role)`` with role ``engine``, ``client`` or ``coordinator``, before
the process builds the objects it patches (``lockstep.instrumentation.vllm_dp_pause``).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from lockstep.impl.protocols import Setting
from lockstep.impl.runtime import RunConfig
from lockstep.models.dp_pause.model import PROTOCOL

INSTRUMENT_ENVIRONMENT = "LOCKSTEP_INSTRUMENT"
SETTINGS = {
    "requests": Setting(1, 0, 3, "requests the client adds (`--requests`)"),
    "sync_interval": Setting(32, 1, 32, "steps between engine all-reduces, vLLM's 32 the default (`--sync-interval`)"),
}


class DpPauseConfig(RunConfig):
    """A dp-pause run's ``RunConfig`` with dp-pause's settings (``SETTINGS``, in ``extra``) as attributes."""

    @classmethod
    def of(cls, config: RunConfig) -> DpPauseConfig:
        """``config`` seen as a dp-pause config (sharing its ``extra``); a ``ValueError`` names a
        setting outside its bounds."""
        if isinstance(config, DpPauseConfig):
            return config
        view = cls(**{name: getattr(config, name) for name in config.to_json()})
        for name, setting in SETTINGS.items():
            value = view.setting(name)
            if not setting.low <= value <= setting.high:
                raise ValueError(f"dp-pause setting {name}={value}: must be between {setting.low} and {setting.high}")
        return view

    def setting(self, name: str) -> int:
        return int(self.extra.get(name, SETTINGS[name].default))

    @property
    def requests(self) -> int:
        return self.setting("requests")

    @property
    def sync_interval(self) -> int:
        return self.setting("sync_interval")


def model_parameters(run: RunConfig) -> dict[str, Any]:
    config = DpPauseConfig.of(run)
    values: dict[str, Any] = {parameter.name: parameter.default for parameter in PROTOCOL.parameters}
    values.update(
        ranks=config.ranks, requests=config.requests, sync_interval=config.sync_interval, max_wave=config.requests + 3
    )
    values.update(config.extra.get("model_parameters", {}))  # a reproduced counterexample's bounds
    if "settle_before_resume" in values:  # the client does not wait for control messages to settle
        values["settle_before_resume"] = 0
    values.update(
        scenario=config.scenario,
        seed=config.seed,
        backend=config.backend,
        timeout=config.timeout,
        waves=config.requests + 3,
        capacities={
            "client>rank": config.requests + 3,
            "coordinator>rank": config.requests + 2,
            "rank>coordinator": config.requests + 5,
            "input_queue": 2 * config.requests + 5,
        },
    )
    return values


def instrument(role: str) -> None:
    """Call ``function(role)`` of ``$LOCKSTEP_INSTRUMENT`` (``module:function``), if it is set."""
    named = os.environ.get(INSTRUMENT_ENVIRONMENT)
    if not named:
        return
    module, colon, function = named.partition(":")
    if not colon:
        raise ValueError(f"{INSTRUMENT_ENVIRONMENT}={named!r}: expected module:function")
    getattr(importlib.import_module(module), function)(role)
