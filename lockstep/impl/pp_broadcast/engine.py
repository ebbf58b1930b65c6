"""The pp-broadcast engine process: scheduler and batch queue (torch-free), ``python -m`` entry.

Mirrors ``EngineCore.step_with_batch_queue`` with the async scheduler (vLLM v0.19.0/v0.20.0):
while the batch queue holds fewer than P steps and a request is unfinished, ``schedule`` makes the
next step (every unfinished request gets its next piece: a prefill chunk, or one decode token,
even while its previous step is in flight, since ``num_computed_tokens`` advances at schedule
time) and sends every rank ``exec(N)`` then ``sample(N)``, in rank order; otherwise it waits for
the oldest step's reply from the last rank and processes it (``process_output``). Each chunk's
size in tokens is a choice (``chunk_tokens``), made when the request arrives; with ``gaps`` the
token budget may leave an unfinished request out of a step (choice ``leave_out``).

Trace: ``schedule`` (args ``leave_out``; observed: the step's row of ``scheduler.steps``,
``num_computed_tokens``, ``gaps_left``, ``scheduled``; clocks ``send:exec>rank:r`` and
``send:sample>rank:r``) and ``process_output`` (``recv:rank:<last>>engine``), as the model's
``engine`` actor. Ranks connect to the engine's socket; rank 0 starts this process. At the end
the status board holds ``elapsed_ns`` (first schedule to last reply) and ``prompt_tokens``, the
benchmark's throughput, and ``scheduled`` (steps scheduled). The status counter ``steps`` is
left to the ranks, so the launcher's time per step (``step_ns`` over ``steps``, each summed over
the processes) is a rank's.
"""

from __future__ import annotations

import collections
import random
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

from lockstep.impl.choices import ChoiceSource
from lockstep.impl.pp_broadcast.scenario import VOCABULARY, setting, workload
from lockstep.impl.process import open_process
from lockstep.impl.runtime import Recorder, RunConfig, StatusBoard, accept, announce, listen, receive
from lockstep.lifetime import die_with_parent

ACTOR = "engine"


class Engine:
    """The scheduler state and the batch-queue loop."""

    def __init__(
        self,
        config: RunConfig,
        ranks: dict[str, Connection],
        recorder: Recorder,
        status: StatusBoard,
        choices: ChoiceSource,
    ) -> None:
        self.config, self.recorder, self.status, self.choices = config, recorder, status, choices
        self.size = config.ranks
        self.last = self.size - 1
        self.connections = [ranks[f"rank:{rank}"] for rank in range(self.size)]
        shape = workload(config)
        self.prompt_pieces, self.lengths = shape.prompt_pieces, shape.lengths
        self.requests = shape.requests
        self.gaps_left = shape.gaps
        mean = setting(config, "chunk_tokens")
        options = sorted({max(1, mean // 2), mean, mean + mean // 2})
        self.chunk_sizes = [
            [int(choices.choose(ACTOR, "chunk_tokens", [str(size) for size in options])) for _ in range(pieces)]
            for pieces in self.prompt_pieces
        ]
        self.prompts = [
            [random.Random(f"{config.seed}/prompt/{request}").randrange(VOCABULARY) for _ in range(sum(sizes))]
            for request, sizes in enumerate(self.chunk_sizes)
        ]
        self.computed = [0] * self.requests  # pieces (the model's num_computed_tokens)
        self.computed_tokens = [0] * self.requests
        self.sent_new: set[int] = set()
        self.scheduled = self.processed = 0
        self.in_flight: collections.deque[int] = collections.deque()
        self.outputs: list[list[int]] = [[] for _ in range(self.requests)]
        self.started_ns = 0  # the first schedule; the status board gets the time to the last reply

    def record(self, action: str, args: dict[str, Any], observed: dict[str, Any], clock: dict[str, int]) -> None:
        self.recorder.record(action, args, observed, clock)

    def unfinished(self) -> list[int]:
        return [request for request in range(self.requests) if self.computed[request] < self.lengths[request]]

    def run(self) -> None:
        while True:
            waiting = self.unfinished()
            if waiting and self.scheduled - self.processed < self.size:
                self.schedule(waiting)
            elif self.in_flight:
                self.process_output()
            else:
                break
        elapsed_ns = time.perf_counter_ns() - self.started_ns
        for connection in self.connections:
            connection.send({"kind": "shutdown"})
        self.status.update(
            "done",
            scheduled=self.scheduled,
            elapsed_ns=elapsed_ns,
            prompt_tokens=sum(len(prompt) for prompt in self.prompts),
        )

    def schedule(self, waiting: list[int]) -> None:
        leave_out = -1
        if self.gaps_left > 0 and len(waiting) > 1:
            leave_out = int(self.choices.choose(ACTOR, "leave_out", ["-1", *[str(request) for request in waiting]]))
        rows, plan, new = [], [0] * self.requests, {}
        for request in waiting:
            if request == leave_out:
                continue
            pieces = self.computed[request]
            tokens = self.chunk_sizes[request][pieces] if pieces < self.prompt_pieces[request] else 1
            rows.append([request, self.computed_tokens[request], tokens])
            plan[request] = pieces + 1
            self.computed[request] += 1
            self.computed_tokens[request] += tokens
            if request not in self.sent_new:
                self.sent_new.add(request)
                new[str(request)] = self.prompts[request]
        if leave_out >= 0:
            self.gaps_left -= 1
        step = self.scheduled
        if step == 0:
            self.started_ns = time.perf_counter_ns()
        self.scheduled += 1
        clock: dict[str, int] = {}
        for rank in range(self.size):
            clock.update(self.recorder.send(f"exec>rank:{rank}"))
            clock.update(self.recorder.send(f"sample>rank:{rank}"))
        self.record(
            "schedule",
            {"leave_out": leave_out},
            {
                self.recorder.vocabulary.entry("scheduler.steps", step): plan,
                "scheduler.num_computed_tokens": list(self.computed),
                "scheduler.gaps_left": self.gaps_left,
                "engine.scheduled": self.scheduled,
            },
            clock,
        )
        for connection in self.connections:  # the executor's RPCs: every worker, the same order
            connection.send({"kind": "exec", "step": step, "rows": rows, "new": new})
            connection.send({"kind": "sample", "step": step})
        self.in_flight.append(step)
        self.status.count(scheduled=self.scheduled)  # ``steps`` is the ranks' counter (module doc)

    def process_output(self) -> None:
        step = self.in_flight[0]
        self.status.update("receive", f"receive(reply of step {step + 1})")
        message = receive(self.connections[self.last])
        self.status.update("running")
        if message.get("kind") != "reply" or message.get("step") != step:
            raise RuntimeError(f"engine: expected the reply of step {step}, got {message!r}")
        self.in_flight.popleft()
        self.processed += 1
        for request, token, kept in message["tokens"]:
            if kept:
                self.outputs[request].append(token)
        self.record(
            "process_output",
            {},
            {"engine.processed": self.processed},
            self.recorder.receive(f"rank:{self.last}>engine"),
        )


def main(config_path: str) -> int:
    config = RunConfig.read(config_path)
    recorder, status, choices = open_process(config, ACTOR)
    listener = listen("127.0.0.1")
    announce(listener.address)
    status.update("receive", "accept(ranks)")
    ranks = accept(listener, [f"rank:{rank}" for rank in range(config.ranks)])
    status.update("running")
    Engine(config, ranks, recorder, status, choices).run()
    recorder.close()
    for connection in ranks.values():
        connection.close()
    listener.close()
    return 0


if __name__ == "__main__":
    die_with_parent()  # a child of rank 0: it ends with it
    sys.exit(main(sys.argv[1]))
