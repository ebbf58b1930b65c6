"""The DP coordinator process of dp-pause (vLLM ``vllm/v1/engine/coordinator.py``), torch-free.

It holds ``engines_running`` and ``current_wave``; handles FIRST_REQ from the client (start a wave
if none runs: START_DP_WAVE to every engine, excluding none, see the model's notes) and the
engines' reports (``wave_complete(w)`` ends wave w; ``start_wave(w)`` from an engine restarts
it, excluding that engine); and publishes (wave, running) to the client on every change. Which
source's message it takes next, when several wait, is asked of the choice source.

An instrumentation named by ``LOCKSTEP_INSTRUMENT`` is installed at start (the dp-pause one
leaves the coordinator unrecorded: vLLM's is one function whose state is local).

Started by rank 0 as ``python -m lockstep.impl.dp_pause.coordinator CONFIG``; it prints its
address as the first line of stdout.
"""

from __future__ import annotations

import collections
import sys
from typing import Any

from lockstep.impl.dp_pause.parameters import DpPauseConfig, instrument
from lockstep.impl.process import open_process
from lockstep.impl.runtime import accept, announce, listen, ready, receive
from lockstep.lifetime import die_with_parent

ACTOR = "coordinator"


def main(config_path: str) -> int:
    config = DpPauseConfig.read(config_path)
    instrument("coordinator")
    listener = listen("127.0.0.1" if config.extra.get("host") is None else str(config.extra["host"]))
    announce(listener.address)
    recorder, status, choices = open_process(config, ACTOR)
    ranks = [f"rank:{rank}" for rank in range(config.ranks)]
    connections = accept(listener, [*ranks, "client"])
    status.update("running")
    buffers: dict[str, collections.deque[Any]] = {name: collections.deque() for name in connections}
    running, wave = False, 0

    def observed() -> dict[str, Any]:
        return {"coordinator.engines_running": running, "coordinator.current_wave": wave}

    outbox: list[tuple[str, dict[str, Any]]] = []  # sent once the event sending them is on file

    def broadcast(start_wave: int, exclude: int | None) -> dict[str, int]:
        clock: dict[str, int] = {}
        for rank in range(config.ranks):
            outbox.append((f"rank:{rank}", {"kind": "START_WAVE", "wave": start_wave, "exclude": exclude}))
            clock.update(recorder.send(f"coordinator>rank:{rank}"))
        return clock

    publications = 0

    def publication_clock(changed: bool) -> dict[str, int]:
        """A change is published on a channel of its own (the client may skip publications, and a
        channel's receives must number 1, 2, ...): the client's read of it names this event."""
        nonlocal publications
        if not changed:
            return {}
        publications += 1
        return recorder.send(f"coordinator>client:publication-{publications}")

    def publish() -> None:
        connections["client"].send({"kind": "PUBLISH", "wave": wave, "running": running, "number": publications})

    live = dict(connections)
    while True:
        waiting = [name for name, buffer in buffers.items() if buffer]
        scripted = choices.peek(ACTOR, "arrival", buffers)
        if not waiting or (scripted is not None and scripted not in waiting):
            status.update("receive", "receive(coordinator input)")
            waiting_connections = ready(live.values())
            status.update("running")
            for connection in waiting_connections:
                name = next(n for n, c in live.items() if c is connection)
                try:
                    buffers[name].append(receive(connection))
                except (EOFError, OSError):
                    del live[name]
            if not live:
                break
            continue
        name = choices.choose(ACTOR, "arrival", waiting)
        message = buffers[name].popleft()
        kind = message["kind"]
        if kind == "SHUTDOWN":
            break
        before = (running, wave)
        if name == "client":  # FIRST_REQ
            clock = recorder.receive("client>coordinator")
            if not running:
                clock.update(broadcast(wave, None))
            running = True
            clock.update(publication_clock((running, wave) != before))
            recorder.record("coordinator_first_request", {}, observed(), clock)
        else:
            rank = int(message["rank"])
            clock = recorder.receive(f"rank:{rank}>coordinator")
            reported = int(message["wave"])
            if kind == "WAVE_COMPLETE" and wave <= reported:
                wave, running = reported + 1, False
            elif kind == "START_WAVE" and (reported > wave or (reported == wave and not running)):
                wave, running = reported, True
                clock.update(broadcast(reported, rank))
            clock.update(publication_clock((running, wave) != before))
            recorder.record("coordinator_report", {"rank": rank}, observed(), clock)
        for name_to, outgoing in outbox:
            connections[name_to].send(outgoing)
        outbox.clear()
        if (running, wave) != before:
            publish()
    status.update("done")
    recorder.close()
    return 0


if __name__ == "__main__":
    die_with_parent()  # a child of rank 0: it ends with it
    sys.exit(main(sys.argv[1]))
