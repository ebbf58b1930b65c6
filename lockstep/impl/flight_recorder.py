"""PyTorch's flight recorder in the runtime: its environment, and each rank's dump beside its trace.

With ``lockstep run --flight-recorder`` (``RunConfig.flight_recorder``) the launcher starts every
rank with ``flight_recorder_environment``: ``TORCH_FR_BUFFER_SIZE`` (2000 entries unless the
caller's environment sets it or ``TORCH_NCCL_TRACE_BUFFER_SIZE``) and, for ``--backend nccl``, the
NCCL watchdog's own dump on a timeout: ``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` with
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE=<trace dir>/nccl-timeout/rank-`` (the watchdog appends the rank)
and ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE=<trace dir>/nccl-timeout/pipe-rank-``.

Gloo has no dump on timeout, so each rank dumps from inside: a ``Dumper`` thread waits for the
trigger file (``request_dumps``: the launcher, or rank 0's watchdog under torchrun, writes it
when it diagnoses a hang) and writes ``<trace dir>/rank-<r>.flight-recorder`` with
``torch._C._distributed_c10d._dump_fr_trace()`` (the CPU backends' recorder; gloo's work is
there) while the rank's main thread still blocks in its collective. A rank whose collective
raised its group's timeout dumps before it exits. With NCCL the NCCL recorder's dump
(``_dump_nccl_trace``) goes to ``<trace dir>/nccl/rank-<r>.flight-recorder``. Every file is
written whole (``lockstep.traces.output.replacing``: a temporary file, then a rename); a rank that cannot dump writes
``rank-<r>.flight-recorder.error`` instead. ``request_dumps`` waits until every rank has written
all its files (NCCL: both) or its error file, so the launcher kills nothing mid-dump. A
``RankPool`` rank starts a dumper for each run with the flight recorder on and stops it after.
``lockstep replay --flight-recorder <trace dir>`` reads them; ``flight-recorder-mapping.json``
beside them names the model communicator of each group and the groups that are the runtime's
own (``runtime_only``: no model communicator; ``write_mapping``); it finds both the ``nccl/``
dumps and the mapping file by the names ``lockstep.traces.flight_recorder`` declares (``NCCL_FOLDER``,
``MAPPING_FILE``), which this module writes. Imports torch lazily (the launcher uses the environment part).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from lockstep.impl.runtime import RunConfig
from lockstep.traces.flight_recorder import MAPPING_FILE, NCCL_FOLDER
from lockstep.traces.output import OutputError, replacing

TRIGGER = "flight-recorder.dump"  # in the run directory
SUFFIX = ".flight-recorder"
MAPPING = MAPPING_FILE
DEFAULT_BUFFER_SIZE = "2000"
DUMP_SECONDS = 8.0  # a dump call that has not returned by then is reported as blocked


def flight_recorder_environment(config: RunConfig, environment: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to the ranks' ``environment`` for a run with the flight recorder on."""
    if not config.flight_recorder or config.trace_dir is None:
        return {}
    added: dict[str, str] = {}
    if "TORCH_FR_BUFFER_SIZE" not in environment and "TORCH_NCCL_TRACE_BUFFER_SIZE" not in environment:
        added["TORCH_FR_BUFFER_SIZE"] = DEFAULT_BUFFER_SIZE
    if config.backend == "nccl":
        folder = Path(config.trace_dir) / "nccl-timeout"
        folder.mkdir(parents=True, exist_ok=True)
        added["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "1"
        added["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = str(folder / "rank-")
        added["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] = str(folder / "pipe-rank-")
    return added


def dump_path(trace_dir: str | os.PathLike[str], rank: int, nccl: bool = False) -> Path:
    folder = Path(trace_dir) / NCCL_FOLDER if nccl else Path(trace_dir)
    return folder / f"rank-{rank}{SUFFIX}"


def error_path(trace_dir: str | os.PathLike[str], rank: int) -> Path:
    """Where a rank says why its dump could not be written."""
    return Path(trace_dir) / f"rank-{rank}{SUFFIX}.error"


def expected_dumps(config: RunConfig, rank: int) -> list[Path]:
    """The files a rank's dump writes: its recorder's, and with NCCL the NCCL recorder's too."""
    assert config.trace_dir is not None
    paths = [dump_path(config.trace_dir, rank)]
    if config.backend == "nccl":
        paths.append(dump_path(config.trace_dir, rank, nccl=True))
    return paths


def request_dumps(config: RunConfig, wait: float = DUMP_SECONDS + 2.0) -> list[int]:
    """Ask every rank to dump (the trigger file) and wait up to ``wait`` seconds until each rank
    has written every file it writes (``expected_dumps``) or its error file; returns the ranks
    that did neither (the caller kills the ranks next: a dump still being written would be lost)."""
    if not config.flight_recorder or config.trace_dir is None:
        return []
    (Path(config.run_dir) / TRIGGER).write_text("dump\n", encoding="utf-8")
    deadline = time.monotonic() + wait
    missing = list(range(config.ranks))
    while missing and time.monotonic() < deadline:
        time.sleep(0.02)
        missing = [
            rank
            for rank in missing
            if not error_path(config.trace_dir, rank).exists()
            and not all(path.exists() for path in expected_dumps(config, rank))
        ]
    return missing


def dump(config: RunConfig, rank: int) -> None:
    """Write this rank's dump(s) now (from any thread)."""
    if config.trace_dir is None:
        return
    from torch._C import _distributed_c10d as c10d

    # torch >= 2.12 names the process-wide recorder's dump _dump_fr_trace; CUDA builds of 2.11 have
    # only _dump_nccl_trace (the same recorder there), CPU builds only _dump_fr_trace.
    dump_all = getattr(c10d, "_dump_fr_trace", None) or getattr(c10d, "_dump_nccl_trace")  # noqa: B009 - untyped
    _write_whole(dump_path(config.trace_dir, rank), dump_all())
    if config.backend == "nccl" and hasattr(c10d, "_dump_nccl_trace") and hasattr(c10d, "_dump_fr_trace"):
        _write_whole(dump_path(config.trace_dir, rank, nccl=True), getattr(c10d, "_dump_nccl_trace")())  # noqa: B009


def _write_whole(path: Path, data: bytes) -> None:
    """``data`` as the whole of ``path`` (``lockstep.traces.output.replacing``: a fresh temporary
    file renamed into place, so a link planted in the trace directory is never followed)."""
    with replacing(path) as temporary, open(temporary, "wb") as file:
        file.write(data)


class Dumper(threading.Thread):
    """Waits for the run's trigger file, then dumps this rank's flight recorder (once)."""

    def __init__(
        self, config: RunConfig, rank: int, groups: Mapping[str, Any], runtime_only: Collection[str] = ()
    ) -> None:
        super().__init__(name="lockstep-flight-recorder", daemon=True)
        self.config, self.rank, self.groups, self.runtime_only = config, rank, groups, runtime_only
        self.trigger = Path(config.run_dir) / TRIGGER
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.trigger.exists():
            if self.stopped.wait(0.02):
                return
        self.dump()

    def stop(self) -> None:
        """End the thread without dumping (a pooled run that completed)."""
        self.stopped.set()
        self.join(timeout=1.0)

    def dump(self) -> None:
        failures: list[str] = []

        def write() -> None:
            try:
                if self.rank == 0:
                    write_mapping(self.config, self.groups, self.runtime_only)
                dump(self.config, self.rank)
            except Exception as error:  # a daemon thread: say why there is no dump instead of dying silently
                failures.append(f"{type(error).__name__}: {error}")

        # torch's dump call can block (seen: _dump_fr_trace on pp-broadcast's rank 0, blocked in its
        # receive, with gloo send/recv in flight): say so instead of leaving no file at all
        writer = threading.Thread(target=write, name="lockstep-flight-recorder-dump", daemon=True)
        writer.start()
        writer.join(DUMP_SECONDS)
        if writer.is_alive():
            failures.append(f"torch's dump call did not return within {DUMP_SECONDS:.0f} s (blocked)")
        if failures:
            message = f"rank {self.rank}: no flight-recorder dump: {failures[0]}\n"
            sys.stderr.write("lockstep: " + message)
            if self.config.trace_dir is not None:
                try:
                    _write_whole(error_path(self.config.trace_dir, self.rank), message.encode("utf-8"))
                except OutputError:  # the trace directory refuses it too: the message above is all there is
                    pass


def start(config: RunConfig, rank: int, groups: Mapping[str, Any], runtime_only: Collection[str] = ()) -> Dumper | None:
    """Start the rank's dumper when the run has the flight recorder on; ``groups`` is the rank's
    communicator-name -> process-group dict and ``runtime_only`` the names of the runtime's own
    groups (both filled later by the protocol's ``run_rank``)."""
    if not config.flight_recorder or config.trace_dir is None:
        return None
    dumper = Dumper(config, rank, groups, runtime_only)
    dumper.start()
    return dumper


def write_mapping(config: RunConfig, groups: Mapping[str, Any], runtime_only: Collection[str] = ()) -> None:
    """Rank 0 writes which dump group is which model communicator (``--mapping`` of replay), and
    which groups are the runtime's own plumbing, no model communicator (``runtime_only``)."""
    if not config.flight_recorder or config.trace_dir is None:
        return
    import torch.distributed as dist

    names = {}
    for communicator, group in list(groups.items()):
        name = dist.distributed_c10d._get_process_group_name(group)
        if name:
            names[name] = communicator
    document = {
        "protocol": config.protocol,
        "variant": config.variant,
        "groups": names,
        "acknowledged": sorted(names.values()),  # Collective.send/recv: every transfer is answered by a 1-element ack
        "runtime_only": sorted(set(runtime_only) & set(names.values())),
    }
    _write_whole(Path(config.trace_dir) / MAPPING, (json.dumps(document, indent=2) + "\n").encode("utf-8"))
