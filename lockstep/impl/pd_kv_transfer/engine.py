"""The loop every pd-kv-transfer engine runs, and the failures it can see for real.

An engine (``prefill.PrefillEngine``, ``decode.DecodeEngine``) offers, at every moment, the steps
its scheduler and worker can take, each named as its model action with arguments
(``reproduction.option``) and bound to the code that takes it. ``Engine.run``:

1. takes in every message that arrived (``Link.receive``) and hands it to the engine;
2. under a script, waits for its turn (``Link.my_turn``) and takes the scripted step (a step
   the engine does not offer then is a ``ChoiceDivergence``: the script left the runtime);
3. otherwise asks its choice source to pick one of the steps it offers (a scenario's preferred
   steps first, ``scenario.Steering``);
4. with nothing to do, is quiet: D reports so to P, and P ends the run when both are quiet and
   every message arrived (``link``): completed, or stuck (a leak or a request waiting for ever,
   ``RunStuck``).

Every step records its model action under its actor (``prefill-scheduler``, ``decode-worker``,
...), with the engine's side of the model's state after it (``observed``: its request phases,
block owners, worker sets and reports, as the model's variables hold them), before its effects
leave the process; under a script, each step's event also carries the
``script:`` message clocks of the progress messages, so the two trace files merge in the
script's order. A failure seen in the bytes or the engine's own
checks (``CorruptionDetected``, ``EngineCoreDied``) is raised after the step that saw it is
recorded, so the trace shows the step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lockstep.impl.choices import ChoiceSource
from lockstep.impl.pd_kv_transfer.link import Link, PeerGone
from lockstep.impl.pd_kv_transfer.reproduction import ACTION, DECODE
from lockstep.impl.pd_kv_transfer.scenario import Steering
from lockstep.impl.runtime import Recorder, StatusBoard
from lockstep.traces import JSONValue

COMPLETED, PEER_FAILED, STUCK = "completed", "peer failed", "stuck"
NOTHING = "(no step enabled)"


class ProtocolFailure(RuntimeError):
    """A failure the protocol's rules forbid, seen for real in a run."""


class EngineCoreDied(ProtocolFailure):
    """An assert of ``Scheduler._update_from_kv_xfer_finished`` fired: vLLM's EngineCore dies."""


class CorruptionDetected(ProtocolFailure):
    """A read got bytes that are not its request's KV, or wrote into a block its request does not own."""


class RunStuck(ProtocolFailure):
    """Nothing can move any more, and a block is still held or a request still alive."""


@dataclass(frozen=True)
class EngineParts:
    """What every engine of a run is given: its rank, the model instance's parameters, its link to
    the peer, its process's recorder, status board and choice source, and the scenario's steering."""

    rank: int
    parameters: dict[str, int]
    link: Link
    recorder: Recorder
    status: StatusBoard
    choices: ChoiceSource
    steering: Steering


class Engine:
    """The loop of one engine; subclasses say which steps they offer and what messages do."""

    def __init__(self, parts: EngineParts) -> None:
        self.rank, self.parameters, self.link = parts.rank, parts.parameters, parts.link
        self.recorder, self.status, self.choices = parts.recorder, parts.status, parts.choices
        self.steering = parts.steering
        self.chooser = f"rank:{parts.rank}"
        self.steps = 0
        self.ended: str | None = None
        self.peer_quiet: dict[str, Any] | None = None
        self._reported: tuple[int, int, bool] | None = None
        self._script_clock: dict[str, int] = {}  # the script's order, put on this engine's next event

    # ------------------------------------------------------------------------------ the engine's
    def options(self) -> dict[str, Callable[[], None]]:
        raise NotImplementedError

    def handle(self, message: dict[str, Any]) -> None:
        raise NotImplementedError

    def settled(self) -> bool:
        raise NotImplementedError

    def holdings(self) -> str:
        """What this engine still holds or waits for (for a stuck run's message)."""
        raise NotImplementedError

    def observed(self) -> dict[str, JSONValue]:
        """This engine's side of the model's state, as the model's variables hold it."""
        raise NotImplementedError

    def record(self, actor: str, action: str, clock: dict[str, int] | None = None, **args: JSONValue) -> None:
        """The step's event, with this engine's state after it (replay compares it with the model's)."""
        merged = {**self._script_clock, **(clock or {})}
        self._script_clock = {}
        self.recorder.record(action, args, self.observed(), merged or None, actor=actor)

    # ------------------------------------------------------------------------------------ loop
    def run(self) -> str:
        """Run until the run ends; ``COMPLETED`` or ``PEER_FAILED`` (this engine's failures raise)."""
        try:
            while self.ended is None:
                self._take(self.link.receive(0))
                if self.ended is not None:
                    break
                if self.link.scripted():
                    if self.link.my_turn():
                        self._step(scripted=True)
                    else:
                        self._take(self.link.receive(None))
                elif self.options():
                    self._step(scripted=False)
                else:
                    self._quiet()
        except PeerGone:
            self.ended = PEER_FAILED
        return self.ended

    def _take(self, messages: list[dict[str, Any]]) -> None:
        for message in messages:
            kind = message["kind"]
            if kind == "stop":
                self.ended = COMPLETED if message["how"] == COMPLETED else PEER_FAILED
            elif kind == "quiet":
                self.peer_quiet = message
            elif kind == "progress":  # the peer's scripted step happened before this engine's next one
                self._script_clock.update(
                    self.recorder.receive(f"script:{1 - self.rank}>{self.rank}:{message['done']}")
                )
            else:
                self.handle(message)

    def _step(self, scripted: bool) -> None:
        options = self.options()
        names = sorted(options)
        if not scripted:
            names = [name for name in names if self.steering.prefers(name)] or names
        chosen = self.choices.choose(self.chooser, ACTION, names or [NOTHING])
        if scripted:  # the progress message that follows carries the order to the peer's trace
            step = self.link.done + 1  # one channel per step: one event may take several peers' steps in
            self._script_clock.update(self.recorder.send(f"script:{self.rank}>{1 - self.rank}:{step}"))
        options[chosen]()
        self.steps += 1
        self.status.count(steps=self.steps)
        if scripted:
            self.link.advance()

    def _quiet(self) -> None:
        report = (self.link.sent, self.link.received, self.settled())
        if self.rank == DECODE:
            if report != self._reported:
                self._reported = report
                self.link.send("quiet", sent=report[0], received=report[1], settled=report[2], holds=self.holdings())
            self._take(self.link.receive(None))
            return
        peer = self.peer_quiet
        if peer is None or peer["sent"] != self.link.received or peer["received"] != self.link.sent:
            self._take(self.link.receive(None))
            return
        if self.settled() and peer["settled"]:
            self.link.send("stop", how=COMPLETED)
            self.ended = COMPLETED
            return
        self.link.send("stop", how=STUCK)
        raise RunStuck(f"no engine can move: P {self.holdings()}; D {peer['holds']}")
