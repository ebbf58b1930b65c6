"""Record real PyTorch flight-recorder dumps of small hung jobs, for lockstep's test fixtures.

Each scenario spawns real ``torch.distributed`` processes (gloo on CPU, or one NCCL rank on a
GPU), runs a few collectives and then a deliberate desync or hang with a short timeout; every
rank dumps its flight recorder after the timeout with ``torch._C._distributed_c10d._dump_fr_trace``
(pickle) and ``_dump_fr_trace_json`` (JSON); torch 2.11 NCCL builds name them ``_dump_nccl_trace``
and ``_dump_nccl_trace_json``. Gloo has no dump-on-timeout of its own (``TORCH_NCCL_DUMP_ON_TIMEOUT``
is the NCCL watchdog's), so the dump is taken in-process once the collective has raised.

    python tools/record_flight_recorder.py tests/data/flight-recorder --scenario gloo-desync

writes ``<out>/<scenario>/pickle/nccl_trace_rank_<r>`` (the stock analyzer's default names),
``<out>/<scenario>/json/rank<r>.json`` and ``<out>/<scenario>/README.md`` naming the versions.

Scenarios:
  gloo-desync   3 ranks: the default group, a "tp" subgroup and a DP group created the way vLLM
                creates it (a bare ProcessGroup with a gloo backend: no name in the dump); then
                ranks 0 and 2 post all_reduce on the DP group and rank 1 posts barrier.
  gloo-cross    3 ranks: ranks 0,1 post all_reduce on the default group while rank 2 posts a
                broadcast on the subgroup {1,2}: each waits for a rank that is elsewhere.
  gloo-wrapped  2 ranks, TORCH_FR_BUFFER_SIZE=6: ten all_reduces (the ring buffer wraps), then
                rank 1 posts nothing more while rank 0 posts an eleventh all_reduce.
  nccl-single   1 NCCL rank on a GPU: a few ops on the default group and a subgroup, dumped
                live; then a watchdog timeout (an op queued behind a long GPU sleep) with
                TORCH_NCCL_DUMP_ON_TIMEOUT=1 writing to TORCH_NCCL_DEBUG_INFO_TEMP_FILE.
  runtime-dp-pause      lockstep's reference runtime, dp-pause pre-fix (the seed hang: rank 0 in
                        the RPC's all_reduce, rank 1 in the forward's), 2 ranks, with
                        `lockstep run --flight-recorder`; the dumps and flight-recorder-mapping.json
                        are copied (the traces are not).
  runtime-pp-broadcast  the same for the pp-broadcast mutant skip-disagree (rank 1 waits in the
                        sampled-token broadcast that rank 0 skipped).

``--backend nccl --ranks N`` runs the runtime scenarios with NCCL worker groups on N GPUs (one per
rank; the engine-level dp-pause group stays gloo): each rank's NCCL recorder goes to
``nccl/rank-<r>.flight-recorder`` and the NCCL watchdog's own dump on timeout to
``nccl-timeout/rank-<r>``, both copied. Record on a 2-GPU machine:

    python tools/record_flight_recorder.py tests/data/flight-recorder --scenario runtime-pp-broadcast \
        --backend nccl --ranks 2
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TIMEOUT_SECONDS = 2.0
WORLD_SIZES = {"gloo-desync": 3, "gloo-cross": 3, "gloo-wrapped": 2, "nccl-single": 1}
RUNTIME_SCENARIOS = {  # scenario -> (protocol, variant)
    "runtime-dp-pause": ("dp-pause", "pre-fix"),
    "runtime-pp-broadcast": ("pp-broadcast", "skip-disagree"),
}
BUFFER_SIZES = {"gloo-wrapped": 6}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stateless_gloo_group(rank: int, world_size: int, port: int) -> Any:
    """A group built the way vLLM's stateless_init_torch_distributed_process_group builds its DP group."""
    import torch
    from torch.distributed import PrefixStore, ProcessGroup, TCPStore
    from torch.distributed.distributed_c10d import ProcessGroupGloo

    store = TCPStore("127.0.0.1", port, world_size, is_master=rank == 0, timeout=datetime.timedelta(seconds=30))
    prefix = PrefixStore("dp", store)
    group = ProcessGroup(prefix, rank, world_size)
    backend = ProcessGroupGloo(prefix, rank, world_size, timeout=datetime.timedelta(seconds=TIMEOUT_SECONDS))
    group._set_default_backend(ProcessGroup.BackendType.GLOO)
    backend._set_sequence_number_for_group()
    group._register_backend(torch.device("cpu"), ProcessGroup.BackendType.GLOO, backend)
    return group


def dump(directory: Path, rank: int) -> None:
    import torch.distributed
    from torch._C import _distributed_c10d as c10d

    # NCCL work is in the NCCL flight recorder (_dump_nccl_trace); gloo work in the CPU one (_dump_fr_trace).
    nccl = torch.distributed.is_nccl_available() and torch.distributed.get_backend() == "nccl"
    pickled = getattr(c10d, "_dump_nccl_trace" if nccl else "_dump_fr_trace")
    as_json = getattr(c10d, "_dump_nccl_trace_json" if nccl else "_dump_fr_trace_json")
    (directory / "pickle").mkdir(parents=True, exist_ok=True)
    (directory / "json").mkdir(parents=True, exist_ok=True)
    (directory / "pickle" / f"nccl_trace_rank_{rank}").write_bytes(pickled())
    (directory / "json" / f"rank{rank}.json").write_bytes(as_json())


def expect_timeout(call: Any) -> None:
    try:
        call()
    except (RuntimeError, ValueError):  # c10d's logger raises ValueError for an unregistered group
        return
    raise SystemExit("the deliberate hang completed: no timeout")


def gloo_rank(rank: int, scenario: str, directory: Path, port: int) -> None:
    import torch
    import torch.distributed as dist

    world_size = WORLD_SIZES[scenario]
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=TIMEOUT_SECONDS),
    )
    hidden = torch.ones(4)
    if scenario == "gloo-desync":
        tensor_parallel = dist.new_group([0, 1, 2], group_desc="tp")
        data_parallel = stateless_gloo_group(rank, world_size, port + 1)
        dist.all_reduce(hidden)
        dist.broadcast(hidden, 0, group=tensor_parallel)
        vote = torch.zeros(1, dtype=torch.int32)
        dist.all_reduce(vote, group=data_parallel)
        dist.all_reduce(vote, group=data_parallel)
        if rank == 1:
            expect_timeout(lambda: data_parallel.barrier().wait())  # dist.barrier refuses unregistered groups
        else:
            expect_timeout(lambda: dist.all_reduce(vote, group=data_parallel))
    elif scenario == "gloo-cross":
        pair = dist.new_group([1, 2])
        dist.all_reduce(hidden)
        if rank == 2:
            expect_timeout(lambda: dist.broadcast(hidden, 1, group=pair))
        else:
            expect_timeout(lambda: dist.all_reduce(hidden))
    elif scenario == "gloo-wrapped":
        for _ in range(10):
            dist.all_reduce(hidden)
        if rank == 0:
            expect_timeout(lambda: dist.all_reduce(hidden))
        else:
            time.sleep(TIMEOUT_SECONDS + 2)  # rank 1 is elsewhere; it dumps after rank 0 has timed out
    dump(directory, rank)
    os._exit(0)  # skip destroy_process_group: the groups are broken by design


def nccl_rank(directory: Path, port: int, phase: str) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=0,
        world_size=1,
        timeout=datetime.timedelta(seconds=TIMEOUT_SECONDS),
        device_id=torch.device("cuda", 0),
    )
    hidden = torch.ones(8, device="cuda")
    sub = dist.new_group([0], group_desc="tp")
    dist.all_reduce(hidden)
    dist.broadcast(hidden, 0, group=sub)
    dist.all_gather_into_tensor(torch.empty(8, device="cuda"), hidden)
    dist.all_reduce(hidden.half().float(), group=sub)
    torch.cuda.synchronize()
    if phase == "live":
        time.sleep(1.0)  # let the watchdog see the completions
        dump(directory / "live", 0)
        os._exit(0)
    torch.cuda._sleep(int(3e10))  # a long kernel: the next collective cannot start before the timeout
    dist.all_reduce(hidden)
    time.sleep(TIMEOUT_SECONDS * 15)  # the watchdog times out, dumps and aborts the process
    os._exit(3)


def versions() -> list[str]:
    import torch

    lines = [f"- torch {torch.__version__}", f"- Python {platform.python_version()}"]
    if torch.cuda.is_available():
        lines.append(
            f"- CUDA {torch.version.cuda}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
            f"{torch.cuda.get_device_name(0)}"
        )
    else:
        lines.append("- CPU only (no CUDA, no NCCL)")
    return lines


def collect_dumps(traces: Path, directory: Path, ranks: int, backend: str, wait: float = 30.0) -> list[Path]:
    """Copy a ``lockstep run --flight-recorder`` run's dumps from ``traces`` into ``directory``.

    Waits up to ``wait`` seconds until every rank has written its dump (``rank-<r>.flight-recorder``
    and, with NCCL, ``nccl/rank-<r>.flight-recorder``) or its error file; then copies those, the
    error files, the NCCL watchdog's own dumps (``nccl-timeout/rank-<r>``) and the mapping. Exits
    naming every missing file (with the error files' text and what the folder holds) when a dump
    is missing, rather than leaving a fixture folder without dumps."""
    import shutil

    def expected(rank: int) -> list[Path]:
        names = [traces / f"rank-{rank}.flight-recorder"]
        return names + ([traces / "nccl" / f"rank-{rank}.flight-recorder"] if backend == "nccl" else [])

    deadline = time.monotonic() + wait
    missing = [path for rank in range(ranks) for path in expected(rank)]
    while missing and time.monotonic() < deadline:
        missing = [path for path in missing if not path.is_file()]
        if missing:
            time.sleep(0.1)
    errors = sorted(traces.glob("*.flight-recorder.error"))
    kept = sorted(traces.glob("*.flight-recorder")) + errors + sorted(traces.glob("flight-recorder-mapping.json"))
    for folder in ("nccl", "nccl-timeout"):
        kept += sorted(path for path in (traces / folder).glob("rank-*") if path.is_file())
    for path in kept:
        target = directory / path.relative_to(traces)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    if missing:
        present = sorted(str(path.relative_to(traces)) for path in traces.rglob("*") if path.is_file())
        why = "".join(f"\n{path.name}: {path.read_text(errors='replace').strip()}" for path in errors)
        raise SystemExit(
            f"no dump after {wait:.0f} s: {', '.join(str(path.relative_to(traces)) for path in missing)}{why}\n"
            f"{traces} holds: {', '.join(present) or 'nothing'}"
        )
    return kept


def record_runtime(out: Path, scenario: str, backend: str, ranks: int) -> Path:
    """Run lockstep's runtime with --flight-recorder to its hang and keep the dumps (not the traces)."""
    import shutil
    import tempfile

    protocol, variant = RUNTIME_SCENARIOS[scenario]
    name = scenario if backend == "gloo" else f"{scenario}-nccl"
    directory = out.resolve() / name
    directory.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="lockstep-record-"))
    traces = scratch / "traces"
    root = Path(__file__).resolve().parents[1]
    command = [sys.executable, "-m", "lockstep", "run", protocol, "--variant", variant, "--ranks", str(ranks)]
    command += ["--backend", backend, "--hang-timeout", "3", "--trace-dir", str(traces), "--no-replay"]
    command += ["--flight-recorder"]
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=root, env=environment)
    if finished.returncode != 1:
        raise SystemExit(
            f"expected a hang (exit 1), got {finished.returncode} (traces kept in {traces}):\n{finished.stderr}"
        )
    collect_dumps(traces, directory, ranks, backend)  # exits naming what is missing (the traces are kept then)
    shutil.rmtree(scratch, ignore_errors=True)
    outcome = finished.stderr.strip().splitlines()[:2]
    readme = [
        f"# Flight-recorder dumps: {name}",
        "",
        f"Recorded for real by `tools/record_flight_recorder.py --scenario {scenario} --backend {backend} "
        f"--ranks {ranks}`:",
        f"`lockstep run {protocol} --variant {variant} --ranks {ranks} --backend {backend} --hang-timeout 3 "
        "--flight-recorder`, which reported",
        "",
        *[f"    {line}" for line in outcome],
        "",
        "Versions:",
        *versions(),
        f"- TORCH_FR_BUFFER_SIZE={os.environ.get('TORCH_FR_BUFFER_SIZE', '2000 (set by lockstep run)')}",
        "",
        "`rank-<r>.flight-recorder`: each rank's `_dump_fr_trace()` taken from inside once the launcher diagnosed",
        "the hang (with NCCL, `nccl/rank-<r>.flight-recorder`: `_dump_nccl_trace()`, and `nccl-timeout/rank-<r>`:",
        "the NCCL watchdog's own dump, where it wrote one); `flight-recorder-mapping.json`: rank 0's",
        "group-to-communicator mapping.",
        "",
    ]
    (directory / "README.md").write_text("\n".join(readme))
    return directory


def record(out: Path, scenario: str) -> Path:
    directory = out / scenario
    directory.mkdir(parents=True, exist_ok=True)
    environment = dict(os.environ, TORCH_FR_BUFFER_SIZE=str(BUFFER_SIZES.get(scenario, 2000)))
    script = [sys.executable, str(Path(__file__).resolve()), str(out), "--scenario", scenario]
    port = free_port()
    if scenario == "nccl-single":
        subprocess.run(
            [*script, "--rank", "0", "--port", str(port), "--phase", "live"], env=environment, check=True, timeout=120
        )
        (directory / "timeout").mkdir(exist_ok=True)
        environment.update(
            TORCH_NCCL_DUMP_ON_TIMEOUT="1",
            TORCH_NCCL_ENABLE_MONITORING="1",
            TORCH_NCCL_DEBUG_INFO_TEMP_FILE=str(directory / "timeout" / "nccl_trace_rank_"),
        )
        subprocess.run(
            [*script, "--rank", "0", "--port", str(free_port()), "--phase", "timeout"], env=environment, timeout=180
        )
    else:
        ranks = [
            subprocess.Popen([*script, "--rank", str(rank), "--port", str(port)], env=environment)
            for rank in range(WORLD_SIZES[scenario])
        ]
        for process in ranks:
            if process.wait(timeout=120) != 0:
                raise SystemExit(f"a rank of {scenario} exited with {process.returncode}")
    readme = directory / "README.md"
    readme.write_text(
        "\n".join(
            [
                f"# Flight-recorder dumps: {scenario}",
                "",
                "Recorded for real by `tools/record_flight_recorder.py` (see its docstring for the scenario) with",
                *versions(),
                f"- TORCH_FR_BUFFER_SIZE={environment['TORCH_FR_BUFFER_SIZE']}",
                "",
                "`pickle/nccl_trace_rank_<r>` come from `_dump_fr_trace()` (or `_dump_nccl_trace()`), "
                "`json/rank<r>.json`",
                "from the JSON variant. They are data only: lockstep reads them with a restricted unpickler.",
                "",
            ]
        )
    )
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--scenario", choices=sorted([*WORLD_SIZES, *RUNTIME_SCENARIOS]), required=True)
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo", help="runtime scenarios only")
    parser.add_argument("--ranks", type=int, default=2, help="runtime scenarios only (NCCL: one GPU per rank)")
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--phase", default="live", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.scenario in RUNTIME_SCENARIOS:
        path = record_runtime(arguments.out, arguments.scenario, arguments.backend, arguments.ranks)
        sys.stdout.write(f"{path}\n")
    elif arguments.rank is None:
        sys.stdout.write(f"{record(arguments.out, arguments.scenario)}\n")
    elif arguments.scenario == "nccl-single":
        nccl_rank(arguments.out / arguments.scenario, arguments.port, arguments.phase)
    else:
        gloo_rank(arguments.rank, arguments.scenario, arguments.out / arguments.scenario, arguments.port)


if __name__ == "__main__":
    main()
