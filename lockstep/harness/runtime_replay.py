"""What a reference-runtime run's traces are judged against: the run's protocol, variant and the
parameters the runtime records, taken from its config before it runs (``runtime_expectations``),
and the replay of a run's traces with them (``runtime_replay``). ``lockstep run``, ``fuzz --impl``
and ``test-runtime`` judge their runs so."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lockstep.checkers.conformance.judgement import PathLike, ReplayVerdict, replay_traces
from lockstep.impl.protocols import RUNTIME_PROTOCOLS
from lockstep.models import get_protocol

if TYPE_CHECKING:
    from lockstep.impl.runtime import RunConfig


def runtime_expectations(config: RunConfig) -> dict[str, Any]:
    """What a ``lockstep run`` (or ``fuzz --impl``) run's traces are replayed against, taken from the
    run's config before it runs: its protocol, variant and the parameters the runtime records
    (``model_parameters(config)``). Pass it to ``replay_traces`` as keywords."""
    known = RUNTIME_PROTOCOLS[config.protocol]
    values = importlib.import_module(f"{known.package}.parameters").model_parameters(config)
    declared = {parameter.name for parameter in get_protocol(config.protocol).parameters}
    parameters = {name: int(value) for name, value in values.items() if name in declared}
    return {"protocol": config.protocol, "variant": config.variant, "parameters": parameters}


def runtime_replay(config: RunConfig, trace_dir: PathLike) -> ReplayVerdict:
    """Replay a run's traces with the run's own model (``runtime_expectations``)."""
    return replay_traces(trace_dir, **runtime_expectations(config))
