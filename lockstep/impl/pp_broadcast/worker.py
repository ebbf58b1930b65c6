"""A pp-broadcast rank: the worker's RPC loop and the model runner's state, one thread.

Mirrors vLLM v0.19.0/v0.20.0 ``Worker.execute_model`` and ``GPUModelRunner`` (``_prepare_inputs``
computing ``discard_request_mask``, ``_prepare_input_ids``, ``sample_tokens``,
``_bookkeeping_sync``, ``_is_all_reqs_chunked_prefill``, ``_pp_broadcast_prev_sampled_token_ids``,
``_pp_receive_prev_sampled_token_ids_to_input_batch``). RPCs come from the engine in order:
``exec(N)``, ``sample(N)``, ``exec(N+1)``, ...

- ``exec(N)``: rank r > 0 first receives the step's metadata from rank r-1 on the gloo group
  ``pp_cpu`` (vLLM's ``recv_object`` of ``irecv_tensor_dict``, blocking the CPU); rank r < P-1
  sends its own (non-blocking, waited at the next ``exec``, as ``_pp_send_work``). Then the
  runner adds new requests, computes ``discard_request_mask`` from its own state
  (``num_computed + num_scheduled < prompt + len(output_token_ids)``), and (rank 0) builds the
  input ids, reading ``prev_sampled_token_ids[prev_req_id_to_index[q]]`` for a mapped decode row.
  The stream's work follows: recv the hidden states (r > 0), forward, send them on (r < P-1).
- ``sample(N)``: the skip predicate of the variant; the last rank samples and broadcasts the ids
  on ``pp``, the others receive them; both rebuild ``prev_req_id_to_index`` from the kept rows and
  append a placeholder per kept row. The last rank then replies to the engine.

The stream on CPU. With NCCL, vLLM's broadcast returns on the CPU at once and rank 0's compute
stream waits for it, so forward(N+1), enqueued later, runs only after the last rank has sampled
N. Here rank 0 runs its ``pp`` ops and kernels in program order on one thread, so the blocking
gloo broadcast of ``sample(N)`` before ``exec(N+1)``'s forward is the faithful CPU analogue of
that stream wait: the same FIFO of ops per rank, the model's one stream per rank (the GPU
never runs ahead of its CPU, one of the model's interleavings).

Trace: the model's actions (``execute_model``, ``sample_tokens``, ``gpu_post``, ``gpu_compute``,
``gpu_complete``, actor ``rank:r``), each with observed values of the rank's own state, RPC
clocks (``recv:exec>rank:r``), metadata clocks (``pp_cpu:a>b``), the transfers' message clocks
and the broadcast's ``enter``/``complete`` (``lockstep.impl.distributed.Collective``). Status
counters: ``steps`` (steps sampled) and ``step_ns`` (wall time in the exec and sample handlers, its
receives, transfers and broadcast included), from which the launcher takes the time per step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import torch
import torch.distributed as dist

from lockstep.impl.distributed import Collective, CollectiveTimeout, Event, Groups, issued
from lockstep.impl.pp_broadcast.scenario import (
    VOCABULARY,
    setting,
    workload,
)
from lockstep.impl.pp_broadcast.stage import Stage
from lockstep.impl.runtime import Recorder, RunConfig, StatusBoard, receive
from lockstep.models.pp_broadcast.variants import POST_FIX, PRE_FIX, SKIP_DISAGREE, SKIP_WHOLE_RECEIVE

# The model's per-rank variables this worker observes (each named ``name[rank]`` by the vocabulary).
OBSERVED = (
    "gpu.step",
    "gpu.phase",
    "gpu.posted",
    "rank.rpcs",
    "rank.output_token_ids",
    "rank.prev_req_id_to_index",
)


@dataclass
class Step:
    """One scheduled step as this rank sees it: rows (request, computed tokens, scheduled tokens)."""

    number: int
    rows: list[tuple[int, int, int]]
    discard: list[bool] = field(default_factory=list)
    hidden: torch.Tensor | None = None  # the last stage's forward output, for sampling


class Worker:
    """One rank's RPC loop and runner state."""

    def __init__(
        self, config: RunConfig, groups: Groups, engine: Connection, recorder: Recorder, status: StatusBoard
    ) -> None:
        if config.variant not in (PRE_FIX, POST_FIX, SKIP_DISAGREE, SKIP_WHOLE_RECEIVE):
            raise ValueError(f"pp-broadcast has no variant {config.variant!r}")
        self.variant = config.variant
        self.rank, self.size = groups.rank, groups.world_size
        self.last = self.size - 1
        self.actor = f"rank:{self.rank}"
        self.engine, self.recorder, self.status = engine, recorder, status
        self.timeout = groups.timeout
        self.pp = Collective(groups, "pp", recorder, status)
        self.cpu_group = groups.groups["pp_cpu"]
        self.device = self.pp.device
        self.stage = Stage(
            self.rank, self.size, setting(config, "hidden"), setting(config, "layers"), config.seed, self.device
        )
        self.requests = workload(config).requests
        self.prompts: dict[int, list[int]] = {}
        self.output_length = [0] * self.requests  # len(requests[q].output_token_ids)
        self.prev_map: dict[int, int] = {}  # prev_req_id_to_index
        self.prev_tokens: torch.Tensor | None = None  # prev_sampled_token_ids
        self.rpcs = 0
        self.gpu_step, self.gpu_phase = 0, self.first_phase
        self.metadata_work: Any = None
        self.step: Step | None = None
        self.steps = 0
        self.step_nanoseconds = 0  # wall time in exec and sample handlers, waits included (status ``step_ns``)
        self.skipped = 0
        # the rank's observed entries, named through the model's vocabulary (``gpu.step[r]``, ...)
        self.entry = {name: recorder.vocabulary.entry(name, self.rank) for name in OBSERVED}

    @property
    def first_phase(self) -> str:
        return "RECV" if self.rank > 0 else "FORWARD"

    # ------------------------------------------------------------------------------ trace helpers
    def gpu(self, action: str, step: int, phase: str, posted: bool, clock: dict[str, int] | None = None) -> Event:
        """A stream event; observed: the stream's position after it."""
        self.gpu_step, self.gpu_phase = step, phase
        entry = self.entry
        observed = {entry["gpu.step"]: step, entry["gpu.phase"]: phase, entry["gpu.posted"]: posted}
        return Event(action, {"rank": self.rank}, observed, clock)

    def write(self, event: Event) -> None:
        self.recorder.record(event.action, event.args, event.observed, event.clock)

    # ------------------------------------------------------------------------------------ loop
    def run(self) -> None:
        while True:
            self.status.update("receive", "receive(rpc)")
            message = receive(self.engine)
            self.status.update("running")
            kind = message["kind"]
            if kind == "shutdown":
                break
            started = time.perf_counter_ns()
            if kind == "exec":
                self.execute_model(message)
            elif kind == "sample":
                self.sample_tokens(message["step"])
            else:
                raise RuntimeError(f"{self.actor}: unknown RPC {kind!r}")
            self.step_nanoseconds += time.perf_counter_ns() - started  # the step's exec and sample work
            self.status.count(steps=self.steps, step_ns=self.step_nanoseconds)
        if self.metadata_work is not None:
            self.metadata_work.wait()
        self.pp.finish()

    # ----------------------------------------------------------------------------- execute_model
    def execute_model(self, message: dict[str, Any]) -> None:
        number = int(message["step"])
        step = Step(number, [(int(q), int(computed), int(tokens)) for q, computed, tokens in message["rows"]])
        for request, prompt in message["new"].items():
            self.prompts[int(request)] = list(prompt)
        tokens = sum(scheduled for _, _, scheduled in step.rows)
        if self.metadata_work is not None:  # _pp_send_work of the previous step
            self.metadata_work.wait()
            self.metadata_work = None
        clock = dict(self.recorder.receive(f"exec>rank:{self.rank}"))
        if self.rank > 0:
            metadata = torch.zeros(1, dtype=torch.int64)
            what = f"recv<-{self.rank - 1}(pp_cpu)#{number + 1}"
            self.status.update("receive", what)
            try:
                issued(dist.irecv(metadata, self.rank - 1, group=self.cpu_group)).wait(_delta(self.timeout))
            except Exception as error:
                self.status.update("timed_out", what)
                raise CollectiveTimeout(f"{self.actor} timed out in {what}: {error}") from error
            self.status.update("running")
            if int(metadata.item()) != tokens:
                raise RuntimeError(
                    f"{self.actor}: step {number} has {tokens} tokens, rank {self.rank - 1} sends "
                    f"{int(metadata.item())}"
                )
            clock.update(self.recorder.receive(f"pp_cpu:{self.rank - 1}>{self.rank}"))
        if self.rank < self.last:
            clock.update(self.recorder.send(f"pp_cpu:{self.rank}>{self.rank + 1}"))
        # _prepare_inputs: discard_request_mask from this rank's own state
        step.discard = [
            computed + scheduled < len(self.prompts[q]) + self.output_length[q] for q, computed, scheduled in step.rows
        ]
        self.rpcs += 1
        self.recorder.record("execute_model", {"rank": self.rank}, {self.entry["rank.rpcs"]: self.rpcs}, clock)
        if self.rank < self.last:
            self.metadata_work = dist.isend(
                torch.tensor([tokens], dtype=torch.int64), self.rank + 1, group=self.cpu_group
            )
        if self.rank == 0:
            hidden = self.stage.embed(self.input_ids(step))
        else:
            hidden = torch.empty(tokens, self.stage.hidden, device=self.device)
            self.pp.recv(
                "recv",
                hidden,
                self.rank - 1,
                posted=self.gpu("gpu_post", number, "RECV", True),
                completed=self.gpu("gpu_complete", number, "FORWARD", False),
            )
        hidden = self.stage.forward(hidden)
        if self.rank == self.last:
            step.hidden = hidden
            self.write(self.gpu("gpu_compute", number, "SAMPLE", False))
        else:
            self.write(self.gpu("gpu_compute", number, "SEND", False))
            self.pp.send(
                "send",
                hidden,
                self.rank + 1,
                posted=self.gpu("gpu_post", number, "SEND", True),
                completed=self.gpu("gpu_complete", number, "BROADCAST", False),
            )
        self.step = step

    def input_ids(self, step: Step) -> list[int]:
        """_prepare_input_ids on rank 0: prompt ids for chunks; a decode row's id from
        prev_sampled_token_ids when the mapping holds the request (else the CPU's placeholder, 0)."""
        ids: list[int] = []
        for request, computed, scheduled in step.rows:
            prompt = self.prompts[request]
            if computed < len(prompt):
                ids.extend(prompt[computed : computed + scheduled])
            elif request in self.prev_map and self.prev_tokens is not None:
                # an id from a receive that was skipped is uninitialised memory (the skip-disagree mutant
                # reads one): wrapped into the vocabulary rather than faulting, so the run goes on to the
                # protocol's own failure, the hang
                ids.append(int(self.prev_tokens[self.prev_map[request], 0].item()) % VOCABULARY)
            else:
                ids.append(0)
        return ids

    # ----------------------------------------------------------------------------- sample_tokens
    def skips(self, step: Step) -> bool:
        """Whether this rank's sample_tokens leaves out the broadcast (the variant's predicate)."""
        every_row_discarded = all(step.discard)  # _is_all_reqs_chunked_prefill()
        if self.variant == PRE_FIX:
            return False
        if self.variant == SKIP_DISAGREE and self.rank != self.last:
            return all(computed < len(self.prompts[q]) for q, computed, _ in step.rows)  # no row decodes
        return every_row_discarded

    def sample_tokens(self, number: int) -> None:
        step = self.step
        if step is None or step.number != number:
            raise RuntimeError(f"{self.actor}: sample({number}) without its exec")
        skip = self.skips(step)
        self.skipped += skip
        frozen = self.variant == SKIP_WHOLE_RECEIVE and skip and self.rank != self.last
        kept = [not discarded for discarded in step.discard]
        if not frozen:
            self.prev_map = {q: row for row, (q, _, _) in enumerate(step.rows) if kept[row]}
            for row, (q, _, _) in enumerate(step.rows):
                self.output_length[q] += kept[row]  # the -1 placeholder
        self.rpcs += 1
        entry = self.entry
        observed: dict[str, Any] = {
            entry["rank.rpcs"]: self.rpcs,
            entry["rank.output_token_ids"]: list(self.output_length),
            entry["rank.prev_req_id_to_index"]: [q in self.prev_map for q in range(self.requests)],
        }
        if self.rank != self.last and skip:  # the stream passes the broadcast the CPU left out
            self.gpu_step, self.gpu_phase = number + 1, self.first_phase
            observed.update({entry["gpu.step"]: number + 1, entry["gpu.phase"]: self.first_phase})
        self.recorder.record(
            "sample_tokens",
            {"rank": self.rank},
            observed,
            self.recorder.receive(f"sample>rank:{self.rank}"),
        )
        rows = len(step.rows)
        if self.rank != self.last:
            received = torch.empty(rows, 1, dtype=torch.int32, device=self.device)  # uninitialised when skipped
            if not skip:
                self.pp.broadcast(
                    "broadcast",
                    received,
                    self.last,
                    posted=self.gpu("gpu_post", number, "BROADCAST", True),
                    completed=self.gpu("gpu_complete", number + 1, self.first_phase, False),
                )
            if not frozen:
                self.prev_tokens = received
        else:
            assert step.hidden is not None
            positions, offset = [], 0
            for _, _, scheduled in step.rows:
                offset += scheduled
                positions.append(offset - 1)
            sampled = self.stage.sample(step.hidden, positions)
            reply = self.recorder.send(f"rank:{self.rank}>engine")
            if skip:
                self.write(self.gpu("gpu_compute", number + 1, self.first_phase, False, reply))
            else:
                self.write(self.gpu("gpu_compute", number, "BROADCAST", False))
                self.pp.broadcast(
                    "broadcast",
                    sampled,
                    self.last,
                    posted=self.gpu("gpu_post", number, "BROADCAST", True),
                    completed=self.gpu("gpu_complete", number + 1, self.first_phase, False, reply),
                )
            self.prev_tokens = sampled  # _bookkeeping_sync
            tokens = [[q, int(sampled[row, 0].item()), kept[row]] for row, (q, _, _) in enumerate(step.rows)]
            self.engine.send({"kind": "reply", "step": number, "tokens": tokens})
        self.step = None
        self.steps += 1


def _delta(seconds: float) -> Any:
    import datetime

    return datetime.timedelta(seconds=seconds)
