"""lockstep.record: write lockstep traces from any process, such as a vLLM engine or worker.

A small recorder for instrumenting real code: no torch, z3, numpy or rich import, only the
standard library and ``lockstep.traces`` (and, for ``parameters``, the pure-Python model
registry). One ``TraceRecorder`` per process writes ``DIRECTORY/<actor>.jsonl`` (``rank:0``
becomes ``rank-0.jsonl``): the header, then one validated line per event, each handed to the OS
in one ``write`` before ``event`` returns, so a killed process leaves a replayable prefix.

    from lockstep import record

    recorder = record.open_trace("runs/1", actor=f"rank:{dp_rank}", protocol="dp-pause",
                                 variant="post-fix", parameters=record.parameters("dp-pause", ranks=2))
    recorder.event("handle_pause", {"rank": dp_rank}, observed={f"pause_state[{dp_rank}]": "PAUSED_ALL"})
    with recorder.collective("worker_dp", "forward"):       # enter before, complete after
        torch.distributed.all_reduce(tensor, group=dp_group)
    recorder.close()

``event`` takes the model's action name and arguments, optionally the part of the model's state
this process can see (``observed``, keys as the model's variables: ``"requests[0]"``, which
``recorder.vocabulary.entry("requests", 0)`` writes; every name and value is checked against
the model, see ``lockstep.spec.vocabulary``) and
message clocks (``send``/``receive`` give the entries for a channel). ``collective`` writes the
``enter``/``complete`` pair of one member with the communicator's per-member sequence number.
``recording_enabled()`` / ``from_environment`` let instrumented code record only when
``LOCKSTEP_TRACE_DIR`` is set. ``write_failure`` is what instrumented code does when recording fails
inside the instrumented program (which must never see the error): it writes ``<actor>.error.json``
beside the trace (``failure_path``), and ``read_failures`` gives a run's such files. ``instrument``
wraps a method of a class so that each call records an event after it returns (a building block
for monkeypatching an engine's methods).
The events each protocol expects, and the vLLM functions that should emit them, are in
``docs/recording-vllm.md``; ``lockstep replay DIRECTORY`` checks what was recorded.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lockstep.traces import JSONValue, TraceHeader, TraceSource
from lockstep.traces.clocks import timestamp
from lockstep.traces.recorder import EventRecorder, RawObject, trace_file_name

if TYPE_CHECKING:
    from lockstep.spec.vocabulary import Vocabulary

TRACE_DIRECTORY_ENVIRONMENT = "LOCKSTEP_TRACE_DIR"
FAILURE_SUFFIX = ".error.json"  # rank-0.error.json beside rank-0.jsonl: why that actor's recording stopped


def parameters(protocol: str, **values: JSONValue) -> dict[str, JSONValue]:
    """Every parameter the protocol's model declares (its defaults), with ``values`` over them.

    Replay instantiates the model from these, so a trace must name every bound it ran with;
    extra keys (a run's own settings) are kept and ignored by replay. An unknown protocol raises
    ``ValueError`` naming the known ones."""
    from lockstep.models import get_protocol
    from lockstep.spec.protocol import UsageError

    try:
        model = get_protocol(protocol)
    except UsageError as error:
        raise ValueError(str(error)) from None
    result: dict[str, JSONValue] = {parameter.name: parameter.default for parameter in model.parameters}
    result.update(values)
    return result


def vocabulary(protocol: str, variant: str, parameters: Mapping[str, JSONValue]) -> Vocabulary:
    """The names and sorts ``protocol``'s model gives ``variant`` at ``parameters`` (its defaults for
    the ones left out); an unknown protocol, variant or out-of-bounds parameter raises ``ValueError``."""
    from lockstep.models import get_protocol
    from lockstep.spec.vocabulary import Vocabulary

    return Vocabulary.of(get_protocol(protocol), variant, parameters)


class TraceRecorder(EventRecorder):
    """The trace file of one actor (one process); safe to share between threads. ``timestamps``: every
    event's clock also says when it happened (``time_ns``: the merge then orders the events it is free
    to order as they happened, see ``lockstep.traces.clocks``).

    The one recorder core (``lockstep.traces.recorder.EventRecorder``) with every event checked
    against the format (instrumented code's events may vary in shape from call to call) and
    against the model's ``vocabulary``: the first action, argument, observed name or value the
    model does not have raises ``TraceFormatError`` naming it. ``vocabulary.entry("mode", 1)``
    names an observed map entry (``"mode[1]"``)."""

    vocabulary: Vocabulary

    def __init__(
        self,
        directory: str | os.PathLike[str],
        actor: str,
        protocol: str,
        variant: str,
        parameters: Mapping[str, JSONValue],
        instance: str = "recorded",
        source: TraceSource | None = None,
        fsync: bool = False,
        timestamps: bool = False,
    ) -> None:
        self.timestamps = timestamps
        header = TraceHeader(
            protocol, variant, instance, dict(parameters), source or TraceSource("runtime", host=platform.node())
        )
        self.vocabulary = vocabulary(protocol, variant, parameters)
        super().__init__(
            actor,
            Path(directory) / trace_file_name(actor),
            header,
            fsync=fsync,
            check_every_event=True,
            vocabulary=self.vocabulary,
        )

    def record(
        self,
        action: str,
        args: Mapping[str, JSONValue] | None = None,
        observed: Mapping[str, JSONValue] | RawObject | None = None,
        clock: Mapping[str, int] | None = None,
        actor: str | None = None,
        flush: bool = True,
    ) -> None:
        """``EventRecorder.record``, with the event's ``time_ns`` in its clock when ``timestamps`` is on."""
        if self.timestamps:
            clock = {**(clock or {}), **timestamp()}
        super().record(action, args, observed, clock, actor, flush)

    def event(
        self,
        action: str,
        args: Mapping[str, JSONValue] | None = None,
        observed: Mapping[str, JSONValue] | None = None,
        clock: Mapping[str, int] | None = None,
        actor: str | None = None,
    ) -> None:
        """Write one event (on disk, as far as the OS goes, when this returns); a malformed one
        raises ``TraceFormatError`` and writes nothing."""
        self.record(action, args, observed, clock, actor)

    def __enter__(self) -> TraceRecorder:
        return self


def open_trace(
    directory: str | os.PathLike[str],
    actor: str,
    protocol: str,
    variant: str,
    parameters: Mapping[str, JSONValue],
    **options: Any,
) -> TraceRecorder:
    """A recorder writing ``directory/<actor>.jsonl`` (see ``TraceRecorder``)."""
    return TraceRecorder(directory, actor, protocol, variant, parameters, **options)


def recording_enabled() -> bool:
    """Whether ``LOCKSTEP_TRACE_DIR`` names a directory to record into."""
    return bool(os.environ.get(TRACE_DIRECTORY_ENVIRONMENT))


def from_environment(
    actor: str, protocol: str, variant: str, parameters: Mapping[str, JSONValue], **options: Any
) -> TraceRecorder | None:
    """A recorder into ``$LOCKSTEP_TRACE_DIR``, or None when it is not set (recording off)."""
    directory = os.environ.get(TRACE_DIRECTORY_ENVIRONMENT)
    return open_trace(directory, actor, protocol, variant, parameters, **options) if directory else None


def failure_path(actor: str, directory: str | os.PathLike[str] | None = None) -> Path | None:
    """Where ``actor``'s recording failure goes: ``<directory>/<actor's file name>.error.json``
    (default directory: ``$LOCKSTEP_TRACE_DIR``; None when that is unset)."""
    folder = directory if directory is not None else os.environ.get(TRACE_DIRECTORY_ENVIRONMENT)
    if not folder:
        return None
    return Path(folder) / (trace_file_name(actor).removesuffix(".jsonl") + FAILURE_SUFFIX)


def write_failure(actor: str, error: BaseException, **details: JSONValue) -> None:
    """Write why ``actor``'s recording stopped (the error, its traceback, ``details``) beside its trace.
    Never raises: it is called inside the instrumented program, which must run on."""
    try:
        path = failure_path(actor)
        if path is None:
            return
        payload = {
            "actor": actor,
            "error": f"{type(error).__name__}: {error}",
            **details,
            "traceback": "".join(traceback.format_exception(error)),
        }
        path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    except Exception:  # nothing may reach the instrumented program
        return


def read_failures(directory: str | os.PathLike[str]) -> list[dict[str, JSONValue]]:
    """The recording failures written into ``directory`` (``write_failure``), by file name; a file
    that does not parse is reported as its text."""
    found: list[dict[str, JSONValue]] = []
    for path in sorted(Path(directory).glob("*" + FAILURE_SUFFIX)):
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            payload = json.loads(text)
        except ValueError:
            payload = {"error": text}
        found.append({"file": str(path), **(payload if isinstance(payload, dict) else {"error": text})})
    return found


EventOf = Callable[..., tuple[str, Mapping[str, JSONValue], Mapping[str, JSONValue] | None] | None]


def instrument(
    owner: type, method: str, recorder_of: Callable[[Any], TraceRecorder | None], event_of: EventOf
) -> Callable[[], None]:
    """Wrap ``owner.method`` so that each call, after it returns, records
    ``event_of(self, *args, **kwargs)`` = ``(action, args, observed)`` (None: record nothing) on
    ``recorder_of(self)`` (None: recording off). Returns a function that undoes the wrap."""
    original = getattr(owner, method)

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        recorder = recorder_of(self)
        if recorder is not None:
            described = event_of(self, *args, **kwargs)
            if described is not None:
                action, arguments, observed = described
                recorder.event(action, arguments, observed)
        return result

    setattr(owner, method, wrapper)
    return lambda: setattr(owner, method, original)
