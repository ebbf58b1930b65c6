"""What every runtime process opens first: its trace recorder, status board and choice source.

``open_process(config, actor)`` gives the process of ``actor`` (``rank:0``, ``client``, ...) a
``Recorder`` whose header carries the protocol's ``parameters.model_parameters(config)`` (every
model parameter and the run's own bounds, so replay can instantiate the model), the ``StatusBoard`` the launcher
reads, and the run's ``ChoiceSource`` (the scripted choices of ``--choices`` first, then the
seed; `lockstep run` checked the file first, and a choice that does not fit names its line),
logging every choice to the run directory. Imports no torch.
"""

from __future__ import annotations

import importlib
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lockstep.impl.choices import ChoiceSource, choice_source, read_script
from lockstep.impl.runtime import Recorder, RunConfig, StatusBoard
from lockstep.traces import TraceSource
from lockstep.traces.output import safe_name


def open_process(
    config: RunConfig, actor: str, parameters: Mapping[str, Any] | None = None
) -> tuple[Recorder, StatusBoard, ChoiceSource]:
    """The recorder, status board and choice source of ``actor``'s process; the header's
    ``parameters`` default to the protocol's ``parameters.model_parameters(config)``."""
    if parameters is None:  # the protocol's package: lockstep.impl.<protocol, dashes as underscores>
        package = "lockstep.impl." + config.protocol.replace("-", "_")
        parameters = importlib.import_module(f"{package}.parameters").model_parameters(config)
    source = TraceSource(
        "runtime",
        backend=config.backend,
        device=config.extra.get("device"),
        torch=config.extra.get("torch"),
        cuda=config.extra.get("cuda"),
        host=platform.node(),
    )
    recorder = Recorder(config, actor, parameters, source)
    status = StatusBoard(config.run_dir, actor)
    status.count(events=0)
    recorder.status = status
    log = Path(config.run_dir) / "choices" / (safe_name(actor) + ".choices")
    log.parent.mkdir(parents=True, exist_ok=True)
    script = None if config.choices is None else read_script(config.choices)
    return recorder, status, choice_source(config.seed, script, log, config.choices)
