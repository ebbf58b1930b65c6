"""Which model judges a trace: the caller's choice, compared with the trace's header.

``resolve_model`` turns the caller's protocol, variant, instance, parameters and recorder profile
(``lockstep replay``'s and ``lockstep show``'s options, ``replay_traces``'s arguments) into the
model ``Instance`` a trace is replayed against; ``resolve_exemptions`` gives the unrecorded actions
and who exempted them. The header informs, it never decides:

- a parameter the run sizes (``SIZING``; the protocol's rank parameter) that the caller did not
  fix is taken from the header (a wrong one makes the trace diverge, it cannot make it pass);
- any other header parameter that differs from the caller's value, and any
  ``parameters.unrecorded`` entry the caller did not exempt, would widen the check:
  ``HeaderMismatch`` (bad input, exit 2) naming the header field, unless ``trust_header``. For a
  runtime recording (``source.kind`` runtime) judged without a recorder profile, the message says
  which profile gives its recorder's values (``--profile runtime`` for ``lockstep run``'s), the
  usual answer; for other traces, how to trust the header or give the value.

Recorder profiles (``RecorderProfile``) are defined in code by the recorders: ``runtime`` for
``lockstep run``'s recordings (``RUNTIME_PROFILES``) and the vLLM instrumentation's (``PROFILES``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lockstep.checkers.conformance.result import default_unrecorded
from lockstep.models import get_protocol
from lockstep.spec.profile import RecorderProfile
from lockstep.spec.protocol import Instance, Protocol, UsageError
from lockstep.traces.merge import TraceInput
from lockstep.traces.reader import TraceInputError

# Parameters that size a run (how many ranks, requests, steps it has): the header may supply them.
SIZING = frozenset(
    {
        "ranks",
        "requests",
        "late_requests",
        "pause_modes",
        "request_steps",
        "rpc",
        "resumes",
        "sync_interval",
        "chunks",
        "decodes",
        "gaps",
        "max_tokens",
        "num_spec_tokens",
        "history_toggles",
        "preemptions",
        "chunked_prefill",
        "kv_load_failures",
        "prefill_len",
        "budget",
        "drafts",
        "steps",
        "max_num_reqs",
        "decode_query_len",
        "largest_capture_size",
        "padded_rows",
        "abort_request",
        "pause_cycles",
    }
)
TRUSTED = "header (trusted)"
TRUST_HINT = "pass --trust-header (trust_header=True) to accept the header's value, or give it yourself"


class HeaderMismatch(TraceInputError):
    """A header value that would widen the check (bad input: exit 2)."""


@dataclass(frozen=True)
class Exemption:
    """Something the replay did not require the trace to record, and who said so."""

    name: str
    origin: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "origin": self.origin}


@dataclass(frozen=True)
class ResolvedModel:
    """The model a trace is judged by, with where each of its values came from."""

    protocol: Protocol
    variant: str
    instance: Instance
    profile: RecorderProfile | None
    parameter_origins: dict[str, str]
    model_origin: dict[str, str]  # protocol, variant, instance -> caller, header or default


def resolve_model(
    trace: TraceInput,
    *,
    protocol: str | Protocol | None = None,
    variant: str | None = None,
    instance: str | None = None,
    parameters: Mapping[str, int] | None = None,
    profile: RecorderProfile | str | None = None,
    trust_header: bool = False,
) -> ResolvedModel:
    """The caller's model for ``trace`` (see the module doc): protocol (a name, or a ``Protocol``
    such as a model file's) and variant from the caller, else the header's; ``HeaderMismatch`` for a
    header value that would widen the check unless ``trust_header``; ``TraceInputError`` or
    ``UsageError`` for other bad input."""
    header, file = trace.header, trace.files[0]
    if isinstance(protocol, Protocol):
        chosen = protocol
    else:
        chosen = _protocol(protocol or header["protocol"], file, explicit=protocol is not None)
    variant_name = _variant(chosen, variant or header["variant"], file, explicit=variant is not None)
    recorder = recorder_profile(profile, chosen.name)
    model, origins = _instance(
        chosen, variant_name, instance, dict(parameters or {}), recorder, header, file, trust_header
    )
    model_origin = {
        "protocol": "caller" if protocol else "header",
        "variant": "caller" if variant else "header",
        "instance": "caller" if instance else "default",
    }
    return ResolvedModel(chosen, variant_name, model, recorder, origins, model_origin)


def resolve_exemptions(
    system: Any,
    trace: TraceInput,
    unrecorded: Iterable[str],
    profile: RecorderProfile | None,
    trust_header: bool,
) -> list[Exemption]:
    """What the replay of ``trace`` against ``system`` exempts, and who said so: collective
    completions of a runtime recording, the profile's and the caller's unrecorded actions, and
    (only with ``trust_header``) the header's; ``HeaderMismatch`` for a header entry that widens."""
    return _exemptions(system, trace.header, trace.files[0], list(unrecorded), profile, trust_header)


def _protocol(name: str, file: str, *, explicit: bool) -> Protocol:
    try:
        return get_protocol(name)
    except UsageError as error:
        if explicit:
            raise
        raise TraceInputError(file, 1, f"header: {error}") from None


def _variant(protocol: Protocol, name: str, file: str, *, explicit: bool) -> str:
    try:
        return protocol.variant(name).name
    except UsageError as error:
        if explicit:
            raise
        raise TraceInputError(file, 1, f"header: {error}") from None


def _header_parameters(protocol: Protocol, header: Mapping[str, Any], file: str) -> dict[str, int]:
    declared = {parameter.name for parameter in protocol.parameters}
    values: dict[str, int] = {}
    for name, value in header["parameters"].items():
        if name not in declared:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise TraceInputError(file, 1, f"header: parameter {name} must be an integer, got {value!r}")
        values[name] = value
    return values


def _instance(
    protocol: Protocol,
    variant: str,
    instance: str | None,
    explicit: dict[str, int],
    profile: RecorderProfile | None,
    header: Mapping[str, Any],
    file: str,
    trust_header: bool,
) -> tuple[Instance, dict[str, str]]:
    """The caller's instance, with sizing parameters the caller left open taken from the header."""
    recorded = _header_parameters(protocol, header, file)
    base = protocol.instance(variant, instance).parameters
    fixed: dict[str, str] = (
        {
            name: f"instance {instance}"
            for name in protocol.instance_spec(instance or protocol.default_instance).parameters
        }
        if instance
        else {}
    )
    sizing = SIZING | ({protocol.rank_parameter} if protocol.rank_parameter else set())
    taken = {
        name: value
        for name, value in recorded.items()
        if name in sizing and name not in explicit and name not in fixed and value != base.get(name)
    }
    try:
        protocol.instance(variant, instance, taken)
    except UsageError as error:
        raise TraceInputError(file, 1, f"header: {error}") from None
    profile_values = profile.values({**base, **taken}) if profile is not None else {}
    fixed.update({name: f"profile {profile.name}" for name in profile_values} if profile is not None else {})
    fixed.update({name: "caller" for name in explicit})
    overrides = {**taken, **profile_values, **explicit}
    model = protocol.instance(variant, instance, overrides)
    trusted: dict[str, int] = {}
    for name, value in recorded.items():
        if value == model.parameters.get(name) or name in taken:
            continue
        if not trust_header or name in explicit:
            origin = fixed.get(name, f"instance {model.name} (the caller's model)")
            raise HeaderMismatch(
                file,
                1,
                f"header: parameters.{name} is {value}, but {origin} gives {model.parameters.get(name)}; "
                + mismatch_hint(header, profile),
            )
        trusted[name] = value
    if trusted:
        overrides.update(trusted)
        model = protocol.instance(variant, instance, overrides)
    origins = {name: fixed.get(name, "default") for name in model.parameters}
    origins.update({name: "header (sizing)" for name in taken})
    origins.update({name: TRUSTED for name in trusted})
    return model, origins


def _exemptions(
    system: Any,
    header: Mapping[str, Any],
    file: str,
    unrecorded: list[str],
    profile: RecorderProfile | None,
    trust_header: bool,
) -> list[Exemption]:
    kind = str(header["source"]["kind"])
    found: dict[str, str] = {
        name: f"collective completion (a {kind} recording)" for name in sorted(default_unrecorded(system, kind))
    }
    if profile is not None:  # a profile covers a recorder's every release: what this model lacks exempts nothing
        found.update(
            {
                name: f"profile {profile.name}"
                for name in profile.unrecorded
                if name not in found and _names_something(system, name)
            }
        )
    found.update({name: "caller" for name in unrecorded if name not in found})
    listed = header["parameters"].get("unrecorded", [])
    if not isinstance(listed, list) or not all(isinstance(item, str) for item in listed):
        raise TraceInputError(file, 1, f"header: parameter unrecorded must be a list of names, got {listed!r}")
    # a name the judged model does not have (another release's action) exempts nothing, so it cannot widen
    widening = [name for name in listed if name not in found and (_names_something(system, name) or ":" in name)]
    if widening and not trust_header:
        raise HeaderMismatch(
            file,
            1,
            f"header: parameters.unrecorded exempts {', '.join(map(repr, widening))}, "
            f"which the caller did not exempt; {mismatch_hint(header, profile)}",
        )
    found.update({name: TRUSTED for name in widening})
    return [Exemption(name, origin) for name, origin in found.items()]


def mismatch_hint(header: Mapping[str, Any], profile: RecorderProfile | None) -> str:
    """What to do about a header value that would widen the check: for a runtime recording judged
    without a recorder profile, the profile that gives its recorder's values (``lockstep run``'s:
    ``--profile runtime``); otherwise trust the header or give the value."""
    if header["source"]["kind"] != "runtime" or profile is not None:
        return TRUST_HINT
    recorders = [name for name in PROFILES if _named_profile(name).protocol == header["protocol"]]
    others = f" (a vLLM recording: --profile {' or '.join(recorders)})" if recorders else ""
    return (
        "the trace is a runtime recording: replay a `lockstep run` recording with --profile runtime "
        f"(profile='runtime'), which gives the values the runtime ran with{others}; "
        "--trust-header takes the header's values as they are"
    )


def _names_something(system: Any, name: str) -> bool:
    """Whether ``name`` is an action, an actor or an actor kind (``rank:*``) of ``system``'s model."""
    return any(
        name in (action.name, action.actor, action.actor.split(":")[0] + ":*") for action in system.machine.actions
    )


PROFILES = {  # name -> module defining PROFILE (or module:ATTRIBUTE)
    "vllm-dp-pause": "lockstep.instrumentation.vllm_dp_pause",
    "vllm-pp-broadcast": "lockstep.instrumentation.vllm_pp_broadcast",
    "vllm-pp-broadcast-async": "lockstep.instrumentation.vllm_pp_broadcast:ASYNC_PROFILE",
    "vllm-computed-tokens": "lockstep.instrumentation.vllm_computed_tokens",
    "vllm-computed-tokens-async": "lockstep.instrumentation.vllm_computed_tokens:ASYNC_PROFILE",
    "vllm-async-placeholders": "lockstep.instrumentation.vllm_async_placeholders",
}


def _dp_pause_runtime(sizing: Mapping[str, int]) -> dict[str, int]:
    """The runtime bounds waves by its requests and records the declared (not derived) response bound."""
    return {
        "max_wave": sizing["requests"] + 3,
        "response_bound": get_protocol("dp-pause").parameter("response_bound").default,
    }


# The reference runtime's recordings (``lockstep.impl.*.parameters.model_parameters`` without a
# reproduced counterexample's bounds): it records every action but collective completions.
RUNTIME_PROFILES = {
    "dp-pause": RecorderProfile("runtime", "dp-pause", (), {"settle_before_resume": 0}, _dp_pause_runtime),
    "pp-broadcast": RecorderProfile("runtime", "pp-broadcast", (), {"hang_bound": 64}),
}


def _named_profile(name: str) -> RecorderProfile:
    """The profile ``PROFILES[name]`` names: a module's ``PROFILE``, or ``module:ATTRIBUTE``."""
    import importlib

    module, _, attribute = PROFILES[name].partition(":")
    found: RecorderProfile = getattr(importlib.import_module(module), attribute or "PROFILE")
    return found


def recorder_profile(name: str | RecorderProfile | None, protocol: str) -> RecorderProfile | None:
    """The recorder profile ``name`` (``--profile``) for ``protocol``, defined in code by the recorder."""
    if name is None or isinstance(name, RecorderProfile):
        found = name
    elif name == "runtime":
        found = RUNTIME_PROFILES.get(protocol, RecorderProfile("runtime", protocol))
    elif name in PROFILES:
        found = _named_profile(name)
    else:
        raise UsageError(f"no recorder profile {name!r}; profiles: runtime, {', '.join(PROFILES)}")
    if found is not None and found.protocol != protocol:
        raise UsageError(f"recorder profile {found.name} is for {found.protocol}, not {protocol}")
    return found


__all__ = [
    "PROFILES",
    "RUNTIME_PROFILES",
    "SIZING",
    "TRUSTED",
    "TRUST_HINT",
    "Exemption",
    "HeaderMismatch",
    "ResolvedModel",
    "mismatch_hint",
    "recorder_profile",
    "resolve_exemptions",
    "resolve_model",
]
