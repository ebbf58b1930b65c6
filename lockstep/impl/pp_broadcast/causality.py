"""Happens-before over a pp-broadcast run's traces: is the pipeline serialised, by causal order?

Serialisation is read from the trace's causal order, not from timings. The events' causal
edges are the ones ``lockstep.traces.merge`` orders by: program order within a file, messages
(``send:<channel>`` = n before ``recv:<channel>`` = n) and collective rendezvous (a member's
``complete`` of op k after every member's ``enter`` of op k). Vector clocks over the merged
order give happens-before between any two events.

For every **all-chunked** step N (every row a non-final prefill chunk, read from the engine's
``schedule`` events) that has a step N+1, ``chunked_steps`` reports whether the last rank
broadcast N, whether its broadcast's ``enter`` happens before rank 0's forward of N+1 (the
``gpu_compute`` event that ends the forward), and whether the last rank's sampling of N does.
Pre-fix: bcast(N)@last precedes fwd(N+1)@0 for every such N (the stuck pipeline). Post-fix: no
broadcast of N at all, and sampling(N)@last does not precede fwd(N+1)@0. Imports no torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from lockstep.models import get_protocol
from lockstep.spec.vocabulary import Vocabulary
from lockstep.traces.merge import open_traces

VectorClock = dict[str, int]


@dataclass(frozen=True)
class ChunkedStep:
    """One all-chunked step N (1-based, as the story counts) followed by a step N+1."""

    step: int
    broadcast: bool  # the last rank entered a broadcast of N
    broadcast_precedes_next_forward: bool  # bcast(N)@last happens before fwd(N+1)@0
    sample_precedes_next_forward: bool  # sampling(N)@last happens before fwd(N+1)@0

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "broadcast": self.broadcast,
            "broadcast_precedes_next_forward": self.broadcast_precedes_next_forward,
            "sample_precedes_next_forward": self.sample_precedes_next_forward,
        }


def _before(first: tuple[str, VectorClock] | None, second: tuple[str, VectorClock] | None) -> bool:
    if first is None or second is None:
        return False
    actor, clock = first
    return clock.get(actor, 0) <= second[1].get(actor, 0)


def chunked_steps(trace_dir: str | os.PathLike[str]) -> list[ChunkedStep]:
    """Every all-chunked step with a successor, and the causal facts above (see the module doc)."""
    trace = open_traces([trace_dir])
    parameters = trace.header["parameters"]
    last = int(parameters["ranks"]) - 1
    prompts = [int(parameters["chunks"])] + [1] * (int(parameters["requests"]) - 1)
    latest: dict[str, VectorClock] = {}
    sends: dict[str, VectorClock] = {}
    enters: dict[tuple[str, int], list[VectorClock]] = {}
    plans: dict[int, list[int]] = {}
    position: dict[str, tuple[int, str]] = {}  # actor -> the stream's (step, phase) after its last event
    broadcasts: dict[int, tuple[str, VectorClock]] = {}  # step -> the last rank's enter
    samples: dict[int, tuple[str, VectorClock]] = {}  # step -> the last rank's sampling kernel
    forwards: dict[int, tuple[str, VectorClock]] = {}  # step -> rank 0's forward kernel
    last_actor = f"rank:{last}"
    # the observed names this reads, through the vocabulary of the run's model (as its ranks wrote them)
    vocabulary = Vocabulary.of(get_protocol("pp-broadcast"), str(trace.header["variant"]), parameters)
    plan_of = {name: key for name, key in vocabulary.entries("scheduler.steps").items() if isinstance(key, int)}
    stream_of = {
        f"rank:{rank}": (vocabulary.entry("gpu.step", rank), vocabulary.entry("gpu.phase", rank))
        for rank in range(last + 1)
    }
    for record in trace.records():
        event = record.event
        actor, action = event["actor"], event["action"]
        clock = dict(latest.get(actor, {}))
        clock[actor] = clock.get(actor, 0) + 1
        stamps = event.get("clock") or {}
        for key, number in stamps.items():
            if key.startswith("recv:"):
                _join(clock, sends.get(f"{key[5:]}#{number}", {}))
        if action == "complete":
            communicator = event["args"]["communicator"]
            for entered in enters.get((communicator, stamps[communicator]), []):
                _join(clock, entered)
        latest[actor] = clock
        for key, number in stamps.items():
            if key.startswith("send:"):
                sends[f"{key[5:]}#{number}"] = clock
        observed = event.get("observed") or {}
        before = position.get(actor)
        if action == "enter":
            communicator = event["args"]["communicator"]
            enters.setdefault((communicator, stamps[communicator]), []).append(clock)
            if actor == last_actor and before is not None and before[1] == "BROADCAST":
                broadcasts[before[0]] = (actor, clock)
        elif action == "schedule":
            for key, value in observed.items():
                if key in plan_of:
                    plans[plan_of[key]] = list(value)
        elif action == "gpu_compute" and before is not None:
            if actor == "rank:0" and before[1] == "FORWARD":
                forwards[before[0]] = (actor, clock)
            elif actor == last_actor and before[1] == "SAMPLE":
                samples[before[0]] = (actor, clock)
        stream = stream_of.get(actor)
        if stream is not None and stream[0] in observed:
            position[actor] = (int(observed[stream[0]]), str(observed[stream[1]]))
        elif stream is not None and actor not in position:
            position[actor] = (0, "RECV" if actor != "rank:0" else "FORWARD")
    found = []
    for step in sorted(plans):
        if step + 1 not in plans or not _all_chunked(plans[step], prompts):
            continue
        forward = forwards.get(step + 1)
        found.append(
            ChunkedStep(
                step + 1,
                step in broadcasts,
                _before(broadcasts.get(step), forward),
                _before(samples.get(step), forward),
            )
        )
    return found


def _all_chunked(plan: list[int], prompts: list[int]) -> bool:
    """Every present row is a non-final chunk (planned value k+1: computed k before the step)."""
    present = [(request, value - 1) for request, value in enumerate(plan) if value > 0]
    return bool(present) and all(computed + 1 < prompts[request] for request, computed in present)


def _join(clock: VectorClock, other: VectorClock) -> None:
    for actor, count in other.items():
        if count > clock.get(actor, 0):
            clock[actor] = count
