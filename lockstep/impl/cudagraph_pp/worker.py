"""One pipeline stage's worker and runner: capture, the engine's schedule (rank 0), the steps.

Mirrors vLLM v0.19.0 (``gpu/model_runner.py``: ``load_model``, ``capture_model``,
``execute_model``; ``gpu_worker.py``: the PP transfer) for the variants of the model:

- ``load_model``: a non-first stage allocates its **persistent** intermediate tensors
  (``max_num_tokens`` rows per key, zeros); the first stage its ``input_ids`` buffer.
- ``capture``: descriptors in the plan's order (PIECEWISE then FULL, by ``num_tokens``
  descending); a non-first stage captures on slices ``[:num_tokens]`` of the persistent buffer
  (``no-persistent-buffer``, as v0.18.0's ``_dummy_run``: a new zero buffer per capture).
  Each capture is recorded as ``capture`` with what the graph really recorded (the address
  class of its input tensors, by ``data_ptr``), its dummy request count and the manager's
  output rows. ``pre-fix`` (v0.18.0 with PP) captures nothing.
- the engine (actor ``engine`` in rank 0's process): once every stage has captured (an
  all-gather on the default group), it draws the run's batches from the choice source and
  records each as ``schedule``; the batches reach every stage at once (a broadcast), as vLLM's
  executor hands every worker the same scheduler output.
- a step on the first stage (``first_forward``): wait on the previous send handles, copy the
  step's ids into the ``input_ids`` buffer, dispatch, replay or run eagerly, ``send``.
- a step on a non-first stage: wait on the send handles, ``receive`` into fresh tensors,
  ``prepare_inputs`` (dispatch; copy every key of the persistent buffer from the received
  tensors, rows ``[:num_tokens_after_padding]``; ``no-copy-in`` skips the copy), ``forward``
  (a graph reads what it recorded, eager the tensors it is given), ``send`` unless last.

Observed values come from the real tensors: addresses by ``data_ptr`` (``PERSISTENT``,
``FRESH_k``, ``CAPTURE_BUFFER``, ...), data by content (``forward.data``: the step whose received
tensors the rows the forward read equal, -1 for what capture left). Each step's output is also
compared with the eager reference of the seeded pipeline (``comparisons``): equal for
``post-fix`` and ``pre-fix``, different for the mutants.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from lockstep.impl.choices import ChoiceSource
from lockstep.impl.cudagraph_pp.descriptors import BatchDescriptor, DescriptorPlan
from lockstep.impl.cudagraph_pp.graphs import GraphManager
from lockstep.impl.cudagraph_pp.p2p import PipelineLink
from lockstep.impl.cudagraph_pp.parameters import graph_kind, scenario_parameters
from lockstep.impl.cudagraph_pp.stages import KEYS, Pipeline, Tensors, step_input_ids
from lockstep.impl.distributed import Groups, share_object
from lockstep.impl.runtime import Recorder, RunConfig, StatusBoard
from lockstep.models.cudagraph_pp.model import NO_COPY_IN, NO_PERSISTENT_BUFFER, PRE_FIX

NO_BUFFER, UNKNOWN = "NO_BUFFER", "EAGER_OUTPUT"
# The model's per-rank variables a stage observes (each named ``name[rank]`` by the vocabulary).
OBSERVED = (
    "graph.input",
    "graph.requests",
    "manager.output_rows",
    "captured",
    "received.keys",
    "received.rows",
    "descriptor",
    "persistent",
    "forward.given",
    "forward.data",
    "forward.step",
    "forward.descriptor",
    "send.source",
    "send.rows",
    "send.step",
)
TOLERANCE = 1e-5


@dataclass(frozen=True)
class Batch:
    """One scheduler output: tokens, requests, uniform decode."""

    tokens: int
    requests: int
    decode: bool


class StageWorker:
    """One rank's stage (see the module doc); ``run`` does the whole run."""

    def __init__(
        self, config: RunConfig, groups: Groups, recorder: Recorder, status: StatusBoard, choices: ChoiceSource
    ) -> None:
        values = scenario_parameters(config)
        self.recorder, self.status, self.choices = recorder, status, choices
        self.variant, self.seed = config.variant, config.seed
        self.rank, self.size = groups.rank, groups.world_size
        self.actor = f"rank:{self.rank}"
        self.last = self.size - 1
        self.steps = values["steps"]
        self.max_num_tokens, self.max_num_reqs = values["max_num_tokens"], values["max_num_reqs"]
        self.decode_query_len = values["decode_query_len"]
        hidden_size = int(config.extra.get("hidden_size", 16))
        self.device = groups.device if config.backend == "nccl" else torch.device("cpu")
        self.eager_only = self.variant == PRE_FIX  # v0.18.0: capture_model returns early with PP
        self.persistent_buffer = self.variant not in (PRE_FIX, NO_PERSISTENT_BUFFER)
        self.copies_in = self.persistent_buffer and self.variant != NO_COPY_IN
        self.plan = DescriptorPlan.build(
            values["cudagraph_mode"],
            values["largest_capture_size"],
            self.max_num_tokens,
            self.max_num_reqs,
            self.decode_query_len,
        )
        self.labels = ["NONE", *dict.fromkeys(descriptor.label for descriptor in self.plan.order)]
        self.pipeline = Pipeline(config.seed, self.size, hidden_size, self.device)
        self.manager = GraphManager(self.rank, self.pipeline, self.max_num_reqs, graph_kind(config) == "cuda")
        self.link = PipelineLink(groups, KEYS, hidden_size, status)
        # the rank's observed entries, named through the model's vocabulary (``captured[r]``, ...)
        self.entry = {name: recorder.vocabulary.entry(name, self.rank) for name in OBSERVED}
        self.addresses: dict[int, str] = {}
        self.keep: list[Tensors] = []  # capture buffers: alive as long as the graphs that read them
        self.received: list[Tensors] = []  # each step's fresh receive tensors, kept alive (unique addresses)
        self.batches: list[Batch] = []
        self.comparisons: list[dict[str, Any]] = []
        # load_model
        self.input_ids = torch.zeros(self.max_num_tokens, dtype=torch.int64, device=self.device)
        self._register({"input_ids": self.input_ids}, "INPUT_BUFFERS")
        self.persistent: Tensors | None = None
        if self.rank >= 1 and self.persistent_buffer:
            self.persistent = {key: torch.zeros(self.max_num_tokens, hidden_size, device=self.device) for key in KEYS}
            self._register(self.persistent, "PERSISTENT")

    # ---------------------------------------------------------------------------- observation
    def _register(self, tensors: Tensors, name: str) -> None:
        for tensor in tensors.values():
            self.addresses[tensor.data_ptr()] = name

    def _name(self, pointers: list[int]) -> str:
        names = {self.addresses.get(pointer, UNKNOWN) for pointer in pointers}
        if len(names) != 1:
            raise RuntimeError(f"{self.actor}: one input set spans several buffers: {sorted(names)}")
        return names.pop()

    def address_of(self, tensors: Tensors) -> str:
        """The model's address class of ``tensors``, from their data pointers."""
        return self._name([tensor.data_ptr() for tensor in tensors.values()])

    def data_of(self, tensor: torch.Tensor, key: str) -> int:
        """The step whose received ``key`` rows ``tensor`` holds (real rows only), -1 for none."""
        for step in range(len(self.received) - 1, -1, -1):
            source, rows = self.received[step].get(key), self.batches[step].tokens
            if source is not None and tensor.shape[0] >= rows and torch.equal(tensor[:rows], source[:rows]):
                return step
        return -1

    def _compare(self, step: int, descriptor: BatchDescriptor | None, output: Tensors) -> None:
        """This step's output against the eager reference of the seeded pipeline."""
        batch = self.batches[step]
        reference = self.pipeline.reference(step_input_ids(self.seed, step, batch.tokens))[self.rank]
        difference = max(float((output[key][: batch.tokens] - reference[key]).abs().max()) for key in reference)
        equal = all(
            torch.allclose(output[key][: batch.tokens], reference[key], atol=TOLERANCE, rtol=TOLERANCE)
            for key in reference
        )
        self.comparisons.append(
            {
                "step": step,
                "descriptor": self._label(descriptor),
                "tokens": batch.tokens,
                "equal_to_eager": equal,
                "max_abs_difference": difference,
            }
        )
        self.status.count(
            eager_equal=sum(c["equal_to_eager"] for c in self.comparisons),
            eager_different=sum(not c["equal_to_eager"] for c in self.comparisons),
        )

    @staticmethod
    def _label(descriptor: BatchDescriptor | None) -> str:
        return "NONE" if descriptor is None else descriptor.label

    def _record(
        self,
        runtime_event: str,
        observed: dict[str, Any] | None = None,
        clock: dict[str, int] | None = None,
        with_rank: bool = True,
    ) -> None:
        args = {"rank": self.rank} if with_rank else {}
        self.recorder.record(runtime_event, args, observed=observed, clock=clock)

    # -------------------------------------------------------------------------------- capture
    def capture(self) -> None:
        """capture_model: every descriptor of the plan, in order (nothing for pre-fix)."""
        if self.eager_only:
            return
        order = self.plan.order
        graph_input = {label: NO_BUFFER for label in self.labels}
        graph_requests = {label: 0 for label in self.labels}
        hidden_size = self.pipeline.hidden_size
        for index, descriptor in enumerate(order):
            rows = descriptor.num_tokens
            if self.rank == 0:
                inputs: Tensors = {"input_ids": self.input_ids[:rows]}
            elif self.persistent is not None:
                inputs = {key: tensor[:rows] for key, tensor in self.persistent.items()}
            else:  # v0.18.0 _dummy_run: new intermediate tensors for every call
                inputs = {key: torch.zeros(rows, hidden_size, device=self.device) for key in KEYS}
                self._register(inputs, "CAPTURE_BUFFER")
                self.keep.append(inputs)
            captured = self.manager.capture(descriptor, inputs)
            assert self.manager.output is not None
            self._register(self.manager.output, "MANAGER_OUTPUT")
            if descriptor.mode == "PIECEWISE":
                for graph in captured.graphs:
                    self._register(graph.outputs, "GRAPH_OUTPUT")
            graph_input[descriptor.label] = self._name(list(captured.graphs[0].input_pointers.values()))
            graph_requests[descriptor.label] = captured.requests
            done = index + 1 == len(order)
            self._record(
                "capture",
                {
                    self.entry["graph.input"]: dict(graph_input),
                    self.entry["graph.requests"]: dict(graph_requests),
                    self.entry["manager.output_rows"]: next(iter(self.manager.output.values())).shape[0],
                    self.entry["captured"]: index + 1,
                },
                clock={f"send:captured:{self.rank}>engine": 1} if done else None,
            )

    # --------------------------------------------------------------------------------- engine
    def schedule(self) -> None:
        """Every stage has captured (all-gather); the engine on rank 0 draws and records the batches."""
        self.status.update("collective", "all_gather(captured)")
        gathered: list[Any] = [None] * self.size
        dist.all_gather_object(gathered, self.rank)
        self.status.update("running", "")
        batches = None
        if self.rank == 0:
            batches = [self._draw(step) for step in range(self.steps)]
        self.status.update("collective", "broadcast(schedule)")
        self.batches = [Batch(*batch) for batch in share_object(batches)]
        self.status.update("running", "")

    def _draw(self, step: int) -> tuple[int, int, bool]:
        choose = self.choices.choose
        tokens = int(choose("engine", "schedule.tokens", [str(t) for t in range(1, self.max_num_tokens + 1)]))
        requests = int(
            choose("engine", "schedule.requests", [str(r) for r in range(1, min(tokens, self.max_num_reqs) + 1)])
        )
        if self.decode_query_len == 1:
            decode = tokens == requests
        else:
            uniform = tokens == requests * self.decode_query_len
            decode = choose("engine", "schedule.decode", ["false", "true"] if uniform else ["false"]) == "true"
        clock = {f"send:schedule>rank:{rank}": step + 1 for rank in range(1, self.size)}
        if step == 0 and not self.eager_only:
            clock.update({f"recv:captured:{rank}>engine": 1 for rank in range(self.size)})
        self.recorder.record(
            "schedule",
            {"tokens": tokens, "requests": requests, "decode": decode},
            clock=clock,
            actor="engine",
        )
        return tokens, requests, decode

    # ---------------------------------------------------------------------------------- steps
    def run(self) -> None:
        self.capture()
        self.schedule()
        for step in range(self.steps):
            started = time.perf_counter_ns()
            if self.rank == 0:
                self._first_stage_step(step)
            else:
                self._stage_step(step)
            self.status.count(
                steps=step + 1, step_ns=self.status.counters.get("step_ns", 0) + time.perf_counter_ns() - started
            )
        self.link.finish()

    def _dispatch(self, batch: Batch) -> tuple[BatchDescriptor | None, int]:
        """The descriptor (None: eager) and num_tokens_after_padding."""
        descriptor = None if self.eager_only else self.plan.dispatch(batch.tokens, batch.requests, batch.decode)
        return descriptor, batch.tokens if descriptor is None else descriptor.num_tokens

    def _first_stage_step(self, step: int) -> None:
        waited = self.link.wait_sends()
        batch = self.batches[step]
        descriptor, rows = self._dispatch(batch)
        self.input_ids[: batch.tokens].copy_(step_input_ids(self.seed, step, batch.tokens).to(self.device))
        given = {"input_ids": self.input_ids[:rows]}
        output = self.manager.run(descriptor, given)
        self._compare(step, descriptor, output)
        self._record(
            "first_forward",
            {
                self.entry["descriptor"]: self._label(descriptor),  # rank 0's entries
                self.entry["forward.given"]: self.address_of(given),
                self.entry["forward.step"]: step,
                self.entry["forward.descriptor"]: self._label(descriptor),
            },
            clock={"recv:pp-ack:1>0": step} if waited else None,
            with_rank=False,
        )
        self._send(step, output)

    def _stage_step(self, step: int) -> None:
        rank = self.rank
        waited = self.link.wait_sends()
        received = self.link.irecv_tensor_dict()
        self.received.append(received)
        self._register(received, f"FRESH_{step}")
        clock = {
            f"recv:pp:{rank - 1}>{rank}": step + 1,
            f"recv:schedule>rank:{rank}": step + 1,
            f"send:pp-ack:{rank}>{rank - 1}": step + 1,
        }
        if waited:
            clock[f"recv:pp-ack:{rank + 1}>{rank}"] = step
        self._record(
            "receive",
            {
                self.entry["received.keys"]: {key: key in received for key in KEYS},
                self.entry["received.rows"]: next(iter(received.values())).shape[0],
            },
            clock,
        )
        self.link.send_ack()
        batch = self.batches[step]
        descriptor, rows = self._dispatch(batch)
        observed: dict[str, Any] = {self.entry["descriptor"]: self._label(descriptor)}
        if self.persistent is not None:
            if self.copies_in:  # every key of the persistent buffer (a missing key is vLLM's KeyError)
                for key, tensor in self.persistent.items():
                    tensor[:rows].copy_(received[key][:rows])
            given = {key: tensor[:rows] for key, tensor in self.persistent.items()}
            observed[self.entry["persistent"]] = {
                key: self.data_of(tensor, key) for key, tensor in self.persistent.items()
            }
        else:  # v0.18.0: the received tensors go straight to the model
            given = {key: tensor[:rows] for key, tensor in received.items()}
        self._record("prepare_inputs", observed)
        reads = self.manager.reads(descriptor, given)
        data = {key: self.data_of(reads[key], key) for key in KEYS}
        output = self.manager.run(descriptor, given)
        self._compare(step, descriptor, output)
        self._record(
            "forward",
            {
                self.entry["forward.given"]: self.address_of(given),
                self.entry["forward.data"]: data,
                self.entry["forward.step"]: step,
                self.entry["forward.descriptor"]: self._label(descriptor),
            },
        )
        if rank < self.last:
            self._send(step, output)

    def _send(self, step: int, output: Tensors) -> None:
        rank = self.rank
        self._record(
            "send",
            {
                self.entry["send.source"]: self.address_of(output),
                self.entry["send.rows"]: next(iter(output.values())).shape[0],
                self.entry["send.step"]: step,
            },
            clock={f"send:pp:{rank}>{rank + 1}": step + 1},
        )
        self.link.isend_tensor_dict(output)
