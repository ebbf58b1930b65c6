"""cudagraph-pp's CUDA path on one GPU, in one process: ``CudaGraph`` and ``GraphManager(use_cuda_graphs=True)``.

The runtime's CUDA path (``--backend nccl``) puts each stage on its own GPU; here every stage of
the seeded pipeline runs on the one device in one process. Each stage gets the buffers that
``worker.py`` gives its graphs under the variant (``load_model``, ``capture``, ``prepare_inputs``):
the first stage an ``input_ids`` buffer; a later stage the persistent buffer, copied into from the
received tensors (``post-fix``), not copied into (``no-copy-in``), or a new zero buffer per capture
with the received tensors handed straight in (``no-persistent-buffer``); ``pre-fix`` captures
nothing. The received tensors are a fresh copy of the previous stage's output, which is what
``irecv_tensor_dict`` gives; the graphs, the manager, the pipeline and the dispatch are the
runtime's own. On real CUDA graph memory this checks what the emulated path's tests check
(``tests/test_runtime_cudagraph_pp.py``): a graph replays whatever its recorded tensors hold then
and never looks at a new tensor; every ``post-fix`` step equals the eager reference within the
worker's tolerance; the mutants' replays differ from it on every later stage; the recorded
inputs' ``data_ptr`` stay put and equal the persistent buffer's (the address the mutant moves);
what a replay reads is the step's received data exactly when the copy-in ran; a graph's outputs
keep their address from replay to replay.

Skipped without CUDA. Imports only torch, lockstep and (when present) pytest, so it also runs
without pytest and without the test suite's conftest: ``python tests/test_cudagraph_cuda.py``
prints a line per check and exits 1 if any failed.
"""

from __future__ import annotations

import inspect
import itertools
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from lockstep.impl.cudagraph_pp import RUNTIME, SCENARIOS
from lockstep.impl.cudagraph_pp.descriptors import BatchDescriptor, DescriptorPlan
from lockstep.impl.cudagraph_pp.graphs import CudaGraph, EmulatedGraph, GraphManager
from lockstep.impl.cudagraph_pp.stages import KEYS, Pipeline, Tensors, step_input_ids
from lockstep.impl.cudagraph_pp.worker import TOLERANCE
from lockstep.models.cudagraph_pp.model import NO_COPY_IN, NO_PERSISTENT_BUFFER, POST_FIX, PRE_FIX

try:
    import pytest
except ImportError:  # run as a script where pytest is not installed
    pytest = None  # type: ignore[assignment]

CUDA = torch.cuda.is_available()
if pytest is not None:
    pytestmark = pytest.mark.skipif(not CUDA, reason="no CUDA device: CudaGraph needs one")

SEED = 7
DIFFERENT = 1e-3  # a mutant's stale replay is off by far more than rounding
DEFAULTS = {name: setting.default for name, setting in RUNTIME.settings.items()}


@dataclass(frozen=True)
class Configuration:
    """The run's sizes: ``largest_capture_size`` (also ``max_num_tokens``), ``max_num_reqs``, ``decode_query_len``."""

    largest: int
    max_num_reqs: int
    decode_query_len: int
    stages: int
    hidden_size: int


CONFIGURATIONS = {
    "defaults": Configuration(
        DEFAULTS["largest_capture_size"],
        DEFAULTS["max_num_reqs"],
        DEFAULTS["decode_query_len"],
        2,
        DEFAULTS["hidden_size"],
    ),
    "largest": Configuration(8, 4, 2, 3, 64),  # the size settings' upper bounds (decode_query_len 2), three stages
}
GRAPHS = {"cuda": CudaGraph, "emulated": EmulatedGraph}
PARAMETERS: dict[str, list[Any]] = {
    "scenario": list(SCENARIOS),
    "variant": [POST_FIX, NO_PERSISTENT_BUFFER, NO_COPY_IN, PRE_FIX],
    "configuration": list(CONFIGURATIONS),
    "graphs": list(GRAPHS),
}


def pytest_generate_tests(metafunc: Any) -> None:
    """Parametrize every test argument named in ``PARAMETERS`` (the script runner uses the same lists)."""
    for name, values in PARAMETERS.items():
        if name in metafunc.fixturenames:
            metafunc.parametrize(name, values)


@dataclass
class StageStep:
    """One stage's part of a step: what it was given, received and read, and its output."""

    given: Tensors
    received: Tensors | None  # None on the first stage
    read: Tensors  # the rows [:tokens] the forward read as its inputs, taken before it ran
    output: Tensors


class SingleProcessPipeline:
    """Every stage on one CUDA device with its own ``GraphManager`` and the worker's buffers for ``variant``."""

    def __init__(
        self, variant: str, scenario: str, configuration: Configuration, graphs: str, device: torch.device
    ) -> None:
        self.device = device
        self.variant, self.configuration = variant, configuration
        largest, hidden = configuration.largest, configuration.hidden_size
        self.pipeline = Pipeline(SEED, configuration.stages, hidden, self.device)
        self.plan = DescriptorPlan.build(
            SCENARIOS[scenario], largest, largest, configuration.max_num_reqs, configuration.decode_query_len
        )
        self.managers = [
            GraphManager(stage, self.pipeline, configuration.max_num_reqs, graphs == "cuda")
            for stage in range(configuration.stages)
        ]
        self.input_ids = torch.zeros(largest, dtype=torch.int64, device=self.device)
        self.persistent: list[Tensors | None] = [None] * configuration.stages
        if variant in (POST_FIX, NO_COPY_IN):
            for stage in range(1, configuration.stages):
                self.persistent[stage] = {key: torch.zeros(largest, hidden, device=self.device) for key in KEYS}
        self.capture_buffers: dict[tuple[int, str], Tensors] = {}  # alive as long as the graphs that read them

    def capture(self) -> None:
        """capture_model on every stage: the plan's descriptors in order (nothing for ``pre-fix``)."""
        if self.variant == PRE_FIX:
            return
        for descriptor in self.plan.order:
            rows = descriptor.num_tokens
            for stage, manager in enumerate(self.managers):
                persistent = self.persistent[stage]
                if stage == 0:
                    inputs: Tensors = {"input_ids": self.input_ids[:rows]}
                elif persistent is not None:
                    inputs = {key: tensor[:rows] for key, tensor in persistent.items()}
                else:  # v0.18.0 _dummy_run: new intermediate tensors for every capture
                    inputs = {
                        key: torch.zeros(rows, self.configuration.hidden_size, device=self.device) for key in KEYS
                    }
                    self.capture_buffers[stage, descriptor.label] = inputs
                manager.capture(descriptor, inputs)

    def dispatch(self, tokens: int, requests: int, decode: bool) -> BatchDescriptor | None:
        return None if self.variant == PRE_FIX else self.plan.dispatch(tokens, requests, decode)

    def step(self, step: int, tokens: int, descriptor: BatchDescriptor | None) -> list[StageStep]:
        """One scheduled step through every stage, as the worker runs it (p2p aside)."""
        rows = tokens if descriptor is None else descriptor.num_tokens
        self.input_ids[:tokens].copy_(step_input_ids(SEED, step, tokens).to(self.device))
        given: Tensors = {"input_ids": self.input_ids[:rows]}
        received: Tensors | None = None
        done: list[StageStep] = []
        for stage, manager in enumerate(self.managers):
            persistent = self.persistent[stage]
            if stage > 0:
                received = {key: tensor.clone() for key, tensor in done[-1].output.items()}  # fresh tensors
                if persistent is not None:
                    if self.variant != NO_COPY_IN:  # prepare_inputs: the copy-in of every key
                        for key, tensor in persistent.items():
                            tensor[:rows].copy_(received[key][:rows])
                    given = {key: tensor[:rows] for key, tensor in persistent.items()}
                else:
                    given = {key: tensor[:rows] for key, tensor in received.items()}
            read = {key: tensor[:tokens].clone() for key, tensor in manager.reads(descriptor, given).items()}
            done.append(StageStep(given, received, read, manager.run(descriptor, given)))
        return done


def scheduled_batches(configuration: Configuration) -> Iterator[tuple[int, int, bool]]:
    """Every (tokens, requests, decode) the engine can draw (``StageWorker._draw``), twice over."""
    multiple = configuration.decode_query_len
    for _ in range(2):
        for tokens in range(1, configuration.largest + 1):
            for requests in range(1, min(tokens, configuration.max_num_reqs) + 1):
                uniform = tokens == requests * multiple
                for decode in [uniform] if multiple == 1 else [False, True] if uniform else [False]:
                    yield tokens, requests, decode


def expected_equal_to_eager(variant: str, stage: int, descriptor: BatchDescriptor | None) -> bool:
    """The first stage reads its own ids; ``no-copy-in`` reads a never-written buffer, eager or replayed;
    ``no-persistent-buffer`` reads its capture buffer only when it replays."""
    if stage == 0 or variant in (POST_FIX, PRE_FIX):
        return True
    return variant == NO_PERSISTENT_BUFFER and descriptor is None


def pointers(tensors: Tensors) -> dict[str, int]:
    return {key: tensor.data_ptr() for key, tensor in tensors.items()}


# ------------------------------------------------------------------------------------------- tests
def test_graph_replays_what_the_recorded_tensors_hold(graphs: str) -> None:
    """Copying into the captured buffer changes the replay; a new tensor with the same values does not."""
    check_graph_replays(graphs, torch.device("cuda"))


def test_stage_replays_against_eager(scenario: str, variant: str, configuration: str, graphs: str) -> None:
    """Every step the engine can schedule, through every stage: outputs, addresses and what the replays read."""
    check_stage_replays(scenario, variant, configuration, graphs, torch.device("cuda"))


def check_graph_replays(graphs: str, device: torch.device) -> None:
    """The checks of ``test_graph_replays_what_the_recorded_tensors_hold`` on ``device``."""
    calls: list[int] = []

    def function(given: Tensors) -> Tensors:
        calls.append(1)
        return {"y": given["x"] * 2 + 1}

    buffer = torch.zeros(3, 2, device=device)
    graph = GRAPHS[graphs](function, {"x": buffer[:2]})
    address, captured_calls = graph.outputs["y"].data_ptr(), len(calls)
    fresh = torch.full((2, 2), 5.0, device=device)
    assert torch.equal(graph.replay()["y"], torch.ones(2, 2, device=device))  # the fresh tensor is not looked at
    buffer[:2].copy_(fresh)
    replayed = graph.replay()
    assert replayed["y"].device.type == device.type and replayed["y"].data_ptr() == address
    assert torch.equal(replayed["y"], torch.full((2, 2), 11.0, device=device))
    assert graph.input_pointers["x"] == buffer.data_ptr() == graph.inputs["x"].data_ptr()
    if graphs == "cuda":  # a replay launches the captured kernels: the Python function does not run again
        assert isinstance(graph.graph, torch.cuda.CUDAGraph) and len(calls) == captured_calls


def check_stage_replays(scenario: str, variant: str, configuration: str, graphs: str, device: torch.device) -> float:
    """The checks of ``test_stage_replays_against_eager`` on ``device``; the largest |output - eager| where equal."""
    sizes = CONFIGURATIONS[configuration]
    process = SingleProcessPipeline(variant, scenario, sizes, graphs, device)
    process.capture()
    for manager in process.managers:
        assert (len(manager.captured) > 0) == (variant != PRE_FIX)
        assert all(isinstance(graph, GRAPHS[graphs]) for found in manager.captured.values() for graph in found.graphs)
        for found in manager.captured.values():  # every input a graph recorded is on the device
            assert all(tensor.device.type == device.type for graph in found.graphs for tensor in graph.inputs.values())
    recorded = {
        (stage, label): dict(found.graphs[0].input_pointers)
        for stage, manager in enumerate(process.managers)
        for label, found in manager.captured.items()
    }
    output_addresses: dict[tuple[int, str], dict[str, int]] = {}
    replays, closest = 0, 0.0
    for step, (tokens, requests, decode) in enumerate(scheduled_batches(sizes)):
        descriptor = process.dispatch(tokens, requests, decode)
        done = process.step(step, tokens, descriptor)
        reference = process.pipeline.reference(step_input_ids(SEED, step, tokens))
        label = "NONE" if descriptor is None else descriptor.label
        for stage, (part, eager) in enumerate(zip(done, reference)):
            where = f"step {step} ({tokens} tokens, {requests} requests, decode {decode}) {label} stage {stage}"
            difference = max(float((part.output[key][:tokens] - eager[key]).abs().max()) for key in eager)
            equal = all(
                torch.allclose(part.output[key][:tokens], eager[key], atol=TOLERANCE, rtol=TOLERANCE) for key in eager
            )
            expected = expected_equal_to_eager(variant, stage, descriptor)
            assert equal == expected, (
                f"{where}: equal to eager {equal}, expected {expected} (max |diff| {difference:.3g})"
            )
            assert expected or difference > DIFFERENT, f"{where}: stale by only {difference:.3g}"
            closest = max(closest, difference) if expected else closest
            if descriptor is None:
                continue
            replays += 1
            assert all(tensor.device.type == device.type for tensor in part.output.values())
            seen = output_addresses.setdefault((stage, label), pointers(part.output))
            assert pointers(part.output) == seen, f"{where}: the graph's outputs moved"
            found = process.managers[stage].captured[label]
            assert pointers(found.inputs) == found.graphs[0].input_pointers == recorded[stage, label], (
                f"{where}: a recorded input moved"
            )
            if stage == 0:
                assert found.graphs[0].input_pointers == {"input_ids": process.input_ids.data_ptr()}
                continue
            assert part.received is not None
            stable = pointers(part.given) == recorded[stage, label]  # A1: the graph is given what it recorded
            assert stable == (variant != NO_PERSISTENT_BUFFER), f"{where}: address stable {stable}"
            persistent = process.persistent[stage]
            if persistent is not None:
                assert recorded[stage, label] == pointers(persistent)
            fresh = all(torch.equal(part.read[key], part.received[key][:tokens]) for key in KEYS)  # A2
            assert fresh == (variant == POST_FIX), f"{where}: the replay read the received data: {fresh}"
    assert (replays > 0) == (variant != PRE_FIX)
    return closest


# ----------------------------------------------------------------------------- without pytest
def main() -> int:
    """Every test over ``PARAMETERS`` on the CUDA device, one line per check; 1 if any failed."""
    if not CUDA:
        print(f"skipped: no CUDA device (torch {torch.__version__})")
        return 0
    device = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    failed = passed = 0
    checks = (
        (test_graph_replays_what_the_recorded_tensors_hold, check_graph_replays),
        (test_stage_replays_against_eager, check_stage_replays),
    )
    for test, check in checks:
        names = list(inspect.signature(test).parameters)
        for values in itertools.product(*(PARAMETERS[name] for name in names)):
            label = f"{test.__name__}[{'-'.join(map(str, values))}]"
            try:
                closest = check(*values, device)
            except Exception:
                failed += 1
                print(f"FAIL {label}")
                traceback.print_exc()
                continue
            passed += 1
            print(f"pass {label}" + ("" if closest is None else f"  max |output - eager| where equal: {closest:.2g}"))
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
