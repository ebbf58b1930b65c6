"""The client driver of dp-pause (vLLM's ``DPLBAsyncMPClient`` driven like issue #36594), torch-free.

It adds ``requests`` requests (the rank of each is a choice), each stamped with the client's
view of the current wave, sending FIRST_REQ to the coordinator when its view says the engines
are idle; then ``pause_scheduler(mode="keep")`` to every engine, waits for every reply, runs a
``collective_rpc`` on every engine, waits, ``resume_scheduler`` on every engine, waits, and
waits for every request's output; then it shuts the engines and the coordinator down. The
order in which it calls the engines is a choice. It applies the coordinator's publications to
its view (recorded only while requests remain to be added, as the model reads the view).

In scenario ``counterexample`` (``lockstep reproduce``) it first takes, in order, the client
events of a model counterexample (``client_program``: requests, one call to one engine at a
time, a call returning, a publication read), including late requests and repeated resumes
(``late_requests``, ``resumes``), then finishes from wherever that left it.

At the points the dp-pause instrumentation patches it has vLLM's shape (``DPLBAsyncMPClient``):
``engines_running``/``current_wave`` (the view), ``core_engines`` (engine identities),
``_send_input(ADD, request, engine)``, ``_call_utility_async(method, engine=...)`` and
``call_utility_async(method)``. An instrumentation named by ``LOCKSTEP_INSTRUMENT`` is installed
at start.

Started by rank 0 as ``python -m lockstep.impl.dp_pause.client CONFIG COORDINATOR_ADDRESS``; it
prints its address as the first line of stdout. Exit 0 when the scenario ran to its end.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from lockstep.impl.dp_pause.parameters import DpPauseConfig, instrument
from lockstep.impl.dp_pause.scenario import paces_pause_after_wave, placement_options
from lockstep.impl.dp_pause.surface import EngineCoreRequestType
from lockstep.impl.process import open_process
from lockstep.impl.runtime import accept, announce, connect, listen, ready, receive

ACTOR = "client"


@dataclass
class EngineCoreRequest:
    """A request as the client sends it: vLLM's ``request_id`` and ``current_wave`` (the view's wave)."""

    request_id: int
    current_wave: int


class Client:
    def __init__(self, config: DpPauseConfig, coordinator_address: tuple[str, int]) -> None:
        self.config = config
        listener = listen("127.0.0.1" if config.extra.get("host") is None else str(config.extra["host"]))
        announce(listener.address)
        self.recorder, self.status, self.choices = open_process(config, ACTOR)
        self.coordinator = connect(coordinator_address, ACTOR)
        self.ranks = accept(listener, [f"rank:{rank}" for rank in range(config.ranks)])
        self.status.update("running")
        self.phase = "REQUESTS" if config.requests else "PAUSE"  # as the model's client starts
        self.engines_running, self.current_wave, self.sent = False, 0, 0  # the view (vLLM's names)
        self.core_engines = [rank.to_bytes(2, "little") for rank in range(config.ranks)]  # EngineIdentity
        self.published: tuple[int, bool] | None = None
        self.publication = 0  # the number of the latest publication received (its channel)
        self.replies: dict[str, list[int]] = {}
        self.outputs: set[int] = set()
        self.called: set[int] = set()  # the ranks the current call was sent to
        self.late = int(config.extra.get("late_requests", 0))  # added after pausing began (a counterexample's)
        self.resumes, self.resume_round = int(config.extra.get("resumes", 1)), 0

    def observed(self) -> dict[str, Any]:
        return {
            "client.phase": self.phase,
            "client.engines_running": self.engines_running,
            "client.current_wave": self.current_wave,
            "client.requests_sent": self.sent,
        }

    def record(
        self,
        event: str,
        args: dict[str, Any] | None = None,
        clock: dict[str, int] | None = None,
        observed: dict[str, Any] | None = None,
    ) -> None:
        self.recorder.record(event, args or {}, observed or self.observed(), clock)

    def receive(self, what: str) -> None:
        """Take every message waiting (blocking for at least one)."""
        connections: list[Connection] = [self.coordinator, *self.ranks.values()]
        self.status.update("receive", f"receive({what})")
        waiting = ready(connections)
        self.status.update("running")
        for connection in waiting:
            message = receive(connection)
            kind = message["kind"]
            if kind == "PUBLISH":
                self.published = (int(message["wave"]), bool(message["running"]))
                self.publication = int(message["number"])
            elif kind == "REPLY":
                self.replies.setdefault(message["call"], []).append(int(message["rank"]))
            elif kind == "OUTPUT":
                self.outputs.add(int(message["request"]))

    def read_publication(self) -> None:
        """The stats task applies the latest publication (recorded while requests remain to add)."""
        if self.published is None:
            return
        wave, running = self.published
        if (wave, running) != (
            self.current_wave,
            self.engines_running,
        ) and self.sent < self.config.requests + self.late:
            self.current_wave, self.engines_running = wave, running
            self.record(
                "client_read_publication",
                {},
                self.recorder.receive(f"coordinator>client:publication-{self.publication}"),
            )

    def order(self, point: str, remaining: list[int]) -> list[int]:
        left, chosen = [str(rank) for rank in remaining], []
        while left:
            pick = left[0] if len(left) == 1 else self.choices.choose(ACTOR, point, left)
            left.remove(pick)
            chosen.append(int(pick))
        return chosen

    # ------------------------------------------------------------------ the client's operations
    def add_request(self, rank: int) -> None:
        """add_request_async: ADD stamped with the view's wave (``_send_input``); FIRST_REQ if the view
        says idle. The runtime's own record is on file before either message is sent."""
        request = EngineCoreRequest(self.sent, self.current_wave)
        first = None if self.engines_running else {"kind": "FIRST_REQ", "wave": self.current_wave, "rank": rank}
        clock = self.recorder.send(f"client>rank:{rank}")
        if first is not None:
            clock.update(self.recorder.send("client>coordinator"))
        self.sent += 1
        if self.sent == self.config.requests and self.phase == "REQUESTS":
            self.phase = "PAUSE"
        self.record("client_add_request", {"rank": rank}, clock, {**self.observed(), "client.engines_running": True})
        self._send_input(EngineCoreRequestType.ADD, request, self.core_engines[rank])
        if first is not None:
            self.coordinator.send(first)
        self.engines_running = True

    def _send_input(self, request_type: EngineCoreRequestType, request: EngineCoreRequest, engine: bytes) -> None:
        """Send an ADD to one engine (vLLM ``MPClient._send_input``)."""
        rank = int.from_bytes(engine, "little")
        self.ranks[f"rank:{rank}"].send({"kind": "ADD", "wave": request.current_wave, "request": request.request_id})

    def send_call(self, kind: str, rank: int) -> None:
        self.record(CALL_EVENTS[kind], {"rank": rank}, self.recorder.send(f"client>rank:{rank}"))  # on file first
        self._call_utility_async(METHODS[kind], engine=self.core_engines[rank])

    def _call_utility_async(self, method: str, *args: Any, engine: bytes) -> None:
        """Send one utility call to one engine (vLLM ``_call_utility_async``; the replies are awaited
        by ``await_call``)."""
        rank = int.from_bytes(engine, "little")
        self.ranks[f"rank:{rank}"].send({"kind": {name: kind for kind, name in METHODS.items()}[method]})
        self.called.add(rank)

    def call_utility_async(self, method: str, *args: Any) -> None:
        """The utility on every engine not yet called (in a chosen order), then every reply
        (vLLM ``DPLBAsyncMPClient.call_utility_async``)."""
        kind = {name: kind for kind, name in METHODS.items()}[method]
        remaining = [rank for rank in range(self.config.ranks) if rank not in self.called]
        for rank in self.order(f"order:{kind}", remaining):
            self.send_call(kind, rank)
        self.await_call(kind)

    def await_call(self, kind: str) -> None:
        """Every engine answered ``kind``: the call returns and the phase moves on."""
        while len(self.replies.get(kind, [])) < self.config.ranks:
            self.receive(f"replies to {kind}")
        clock: dict[str, int] = {}
        for rank in sorted(self.replies.pop(kind)):
            clock.update(self.recorder.receive(f"rank:{rank}>client"))
        self.called = set()
        following = FOLLOWING[kind]
        if kind == "RESUME" and self.resume_round + 1 < self.resumes:
            self.resume_round, following = self.resume_round + 1, "RESUME"
        self.phase = following
        self.record(f"{CALL_EVENTS[kind]}_returned", {}, clock)

    def await_publication(self) -> None:
        """The stats task applies a publication that differs from the view (waiting for one)."""
        while self.published is None or self.published == (self.current_wave, self.engines_running):
            self.receive("the coordinator's publication")
        self.read_publication()

    # -------------------------------------------------------------------------------- the run
    def follow(self, program: list[dict[str, Any]]) -> None:
        """Take the client events of a model counterexample, in order (``lockstep reproduce``)."""
        for event in program:
            action, args = event["action"], event.get("args", {})
            if action == "client_add_request":
                self.add_request(int(args["rank"]))
            elif action == "client_read_publication":
                self.await_publication()
            elif action.endswith("_returned"):
                self.await_call(CALL_KINDS[action.removesuffix("_returned")])
            elif action in CALL_KINDS:
                self.send_call(CALL_KINDS[action], int(args["rank"]))
            else:
                raise ValueError(f"the runtime client cannot take {action}")

    def finish(self) -> None:
        """From wherever the client is: the rest of its requests, its calls, the outputs."""
        config, used = self.config, set[int]()
        while self.sent < config.requests:
            options = [str(rank) for rank in placement_options(config.scenario, config.ranks, used)]
            rank = int(options[0] if len(options) == 1 else self.choices.choose(ACTOR, "placement", options))
            used.add(rank)
            self.add_request(rank)
            self.read_publication()
        if paces_pause_after_wave(config.scenario) and self.phase == "PAUSE" and not self.called:
            while self.published is None or not self.published[1]:
                self.receive("the coordinator's publication of the wave")
        while self.phase != "DONE":
            self.call_utility_async(METHODS[self.phase])
        while self.sent < config.requests + self.late:  # late requests the program did not add
            self.add_request(int(self.choices.choose(ACTOR, "placement", [str(rank) for rank in range(config.ranks)])))
        while len(self.outputs) < self.sent:
            self.receive("request outputs")

    def run(self) -> int:
        if self.config.scenario == "counterexample":
            self.follow(list(self.config.extra.get("client_program", [])))
        self.finish()
        for connection in [*self.ranks.values(), self.coordinator]:
            connection.send({"kind": "SHUTDOWN"})
        self.status.update("done")
        self.recorder.close()
        return 0


CALL_KINDS = {"client_pause": "PAUSE", "client_collective_rpc": "RPC", "client_resume": "RESUME"}
CALL_EVENTS = {kind: event for event, kind in CALL_KINDS.items()}
METHODS = {"PAUSE": "pause_scheduler", "RPC": "collective_rpc", "RESUME": "resume_scheduler"}  # vLLM's utility names
FOLLOWING = {"PAUSE": "RPC", "RPC": "RESUME", "RESUME": "DONE"}


def main(config_path: str, coordinator_address: str) -> int:
    config = DpPauseConfig.read(config_path)
    instrument("client")
    host, port = json.loads(coordinator_address)
    try:
        return Client(config, (str(host), int(port))).run()
    except (EOFError, ConnectionError) as error:  # a rank went away (killed, or timed out in a collective)
        sys.stderr.write(f"lockstep: client: a connection closed ({type(error).__name__}); stopping\n")
        return 3


if __name__ == "__main__":  # run the imported module's main, whose Client an instrumentation can patch
    from lockstep.impl.dp_pause import client as imported
    from lockstep.lifetime import die_with_parent

    die_with_parent()  # a child of rank 0: it ends with it
    sys.exit(imported.main(sys.argv[1], sys.argv[2]))
