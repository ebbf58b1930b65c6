"""The vectorised BFS partitioned across processes with torch.distributed (``--workers N``).

Every process owns the states whose fingerprint is its rank modulo the number of processes. A
level is expanded where its states live; the distinct successors are sent to their owners with
one ``all_to_all_single`` (gloo on CPU, NCCL for ``bfs-gpu`` on GPUs, a tensor per level) with
their discovery keys, and each owner keeps the ones it has not seen: the next level. A state's global id is its local
index
times the number of processes plus the owner's rank, so parent links cross processes. After each
level the processes agree (one small ``all_gather_object``) on the totals and on whether to stop:
a limit on any process, the first violation with ``stop_at_first``, or every property decided.
At the end the processes share the parent links and the findings, and each rebuilds the shortest
counterexamples as the one-process engine does; the counts equal the one-process engine's.

``check_distributed`` starts the processes itself (rank 0 is the caller) or, under ``torchrun``
(``WORLD_SIZE``/``RANK`` set), joins the job torchrun started; every process returns the result.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

import numpy as np

from lockstep.checkers.explicit import FIRST_VIOLATION, Progress, first_violation
from lockstep.checkers.limits import Limits, LimitWatch
from lockstep.checkers.result import CheckResult, PropertyResult, Statistics, Verdict
from lockstep.checkers.vector.backend import Backend, make_backend
from lockstep.checkers.vector.search import VectorSearch, _Found
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import UsageError


class PartitionedSearch(VectorSearch):
    """One process's part of a partitioned search (the process group is already initialised)."""

    def __init__(self, machine: Machine, backend: Backend, *, rank: int, world: int, **options: Any) -> None:
        super().__init__(machine, backend, **options)
        import torch
        import torch.distributed as distributed

        self.torch = torch
        self.distributed = distributed
        self.rank, self.world = rank, world
        self.parent_type = np.int64
        self.links_on_device = False  # the links are gathered as numpy arrays at the end
        self.prefilter = False  # a successor's owner, not this process, knows whether it was seen
        self.root = -1
        self.exchange_device = backend.device if backend.name == "torch" else "cpu"
        self.totals = (0, 0)  # every process's stored states and transitions, after the last level
        self._tables: list[tuple[np.ndarray, np.ndarray]] = []

    def _global(self, local: Any) -> Any:
        return local * self.world + self.rank

    def _initial(self) -> Any:
        first, key = self._initial_state()
        if int(self.backend.to_numpy(self._owners(key))[0]) != self.rank:
            return self.backend.empty_words(self.layout.words)  # another process owns it
        self._store(first, key, np.array([self.root], dtype=self.parent_type), np.zeros(1, dtype=self.via_type))
        return first

    def _owners(self, keys: Any) -> Any:
        return keys % self.world

    def _live(self, frontier: Any) -> bool:
        count = self.torch.tensor([int(frontier.shape[1])], dtype=self.torch.int64, device=self.exchange_device)
        self.distributed.all_reduce(count)
        return bool(int(count.item()))

    def _level(self, frontier: Any, watch: LimitWatch, started: float) -> tuple[Any, str | None]:
        backend = self.backend
        base = self.stored - int(frontier.shape[1])
        parts = []
        for start in range(0, int(frontier.shape[1]), self.chunk):
            candidates = self._successors(frontier[:, start : start + self.chunk], base + start)
            if candidates is not None:  # compact: the successors not stored here, gathered to be sent
                states, keys, discovery, columns = candidates
                parts.append((states if columns is None else states[:, columns], keys, discovery))
        words = self.layout.words
        if parts:
            states = backend.concatenate([part[0] for part in parts], axis=1)
            keys = backend.concatenate([part[1] for part in parts])
            discovery = backend.concatenate([part[2] for part in parts])
        else:
            states, keys, discovery = backend.empty_words(words), backend.empty(), backend.empty()
        states, keys, discovery = self._exchange(states, keys, discovery)
        chosen, discovery = self.visited.unique(keys, states, discovery)
        following = self._admit(states[:, chosen], keys[chosen], discovery, None)
        self._commit()
        stopped = self._agree(watch)
        if self.progress is not None and self.rank == 0:
            self.progress(Statistics(self.totals[0], self.totals[1], self.depth, time.monotonic() - started))
        return following, stopped

    def _exchange(self, states: Any, keys: Any, discovery: Any) -> tuple[Any, Any, Any]:
        """Send every candidate to the process that owns it; return what this process received."""
        backend, torch = self.backend, self.torch
        owners = self._owners(keys)
        order = backend.argsort(owners)
        rows = backend.concatenate([keys[None, :], discovery[None, :], states], axis=0)[:, order]
        width = int(rows.shape[0])
        counts = np.bincount(backend.to_numpy(owners).astype(np.int64), minlength=self.world)
        outgoing = torch.as_tensor(
            rows.T.reshape(-1) if backend.name == "torch" else np.ascontiguousarray(rows.T).reshape(-1),
            device=self.exchange_device,
        )
        sent = torch.as_tensor(counts, dtype=torch.int64, device=self.exchange_device)
        received = torch.empty_like(sent)
        self.distributed.all_to_all_single(received, sent)
        incoming = received.cpu().tolist()
        buffer = torch.empty(sum(incoming) * width, dtype=torch.int64, device=self.exchange_device)
        self.distributed.all_to_all_single(
            buffer,
            outgoing.contiguous(),
            output_split_sizes=[count * width for count in incoming],
            input_split_sizes=[int(count) * width for count in counts],
        )
        table = buffer.reshape(-1, width).T
        if backend.name != "torch":
            table = table.numpy()
        return table[2:], table[0], table[1]

    def _agree(self, watch: LimitWatch) -> str | None:
        """Share totals and findings after a level; every process reaches the same decision."""
        local_stop = watch.exceeded(self.totals[0])
        payload = (self.stored, self.stats.transitions or 0, set(self.found), local_stop, sorted(self.fired))
        shared: list[Any] = [None] * self.world
        self.distributed.all_gather_object(shared, payload)
        self.totals = (sum(item[0] for item in shared), sum(item[1] for item in shared))
        for item in shared:
            self.fired.update(item[4])
        found = set().union(*(item[2] for item in shared))
        properties = self.machine.properties
        stops = [item[3] for item in shared if item[3] is not None]
        if self.stop_at_first and first_violation(properties, found, self.watched):
            return FIRST_VIOLATION
        if len(found) == len(properties):
            return "all-found"
        if self.limits.max_states is not None and self.totals[0] >= self.limits.max_states:
            return "max-states"
        return stops[0] if stops else None

    def _should_stop(self, watch: LimitWatch) -> str | None:
        return None  # decided once per level, together (``_agree``)

    def gather(self) -> None:
        """Share findings, totals and parent links, so that every process can rebuild the result."""
        local = (
            self.stored,
            self.stats.transitions or 0,
            self.found,
            sorted(self.fired),
            np.concatenate(self.parents) if self.parents else np.empty(0, np.int64),
            np.concatenate([via for via in self.via if via is not None]) if self.via else np.empty(0, self.via_type),
        )
        shared: list[Any] = [None] * self.world
        self.distributed.all_gather_object(shared, local)
        self.stored = sum(item[0] for item in shared)
        self.stats.transitions = sum(item[1] for item in shared)
        merged: dict[int, tuple[int, int, _Found]] = {}
        for rank, item in enumerate(shared):
            self.fired.update(item[3])
            for position, found in item[2].items():
                if position not in merged or (found.depth, rank) < merged[position][:2]:
                    merged[position] = (found.depth, rank, found)
        self.found = {position: entry[2] for position, entry in merged.items()}
        self._tables = [(item[4], item[5]) for item in shared]

    def parent_of(self, state: int) -> tuple[int, int]:
        parents, via = self._tables[state % self.world]
        local = state // self.world
        return int(parents[local]), int(via[local])

    def _result(self, complete: bool, bounded: bool, stopped: str | None) -> CheckResult:
        self.gather()
        self.stats.states = self.stored
        return super()._result(complete, bounded, stopped)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _watch_parent(parent: int) -> None:
    """End this worker when the process that started it is gone (it was killed, say)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(1)


def _worker(
    rank: int,
    world: int,
    address: str,
    machine: Machine,
    engine: str,
    device: str | None,
    options: dict[str, Any],
    parent: int,
) -> None:
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    _run_rank(rank, world, address, machine, engine, device, options)


def _run_rank(
    rank: int,
    world: int,
    address: str | None,
    machine: Machine,
    engine: str,
    device: str | None,
    options: dict[str, Any],
) -> CheckResult:
    import torch.distributed as distributed

    gpu = engine == "bfs-gpu" and (device or "cuda").startswith("cuda")
    local_device = device
    if gpu:
        import torch

        local = int(os.environ.get("LOCAL_RANK", rank))
        if torch.cuda.device_count() <= local:
            raise UsageError(
                f"--workers {world} with bfs-gpu needs a GPU per process; {torch.cuda.device_count()} visible"
            )
        local_device = f"cuda:{local}"
        torch.cuda.set_device(local)
    backend_name = "cpu:gloo,cuda:nccl" if gpu else "gloo"
    if address is None:
        distributed.init_process_group(backend_name)
    else:
        distributed.init_process_group(backend_name, init_method=address, rank=rank, world_size=world)
    try:
        search = PartitionedSearch(
            machine, make_backend(engine, local_device), rank=rank, world=world, engine=engine, **options
        )
        return search.run()
    finally:
        distributed.destroy_process_group()


def check_distributed(
    machine: Machine,
    engine: str,
    workers: int,
    *,
    symmetry: bool = False,
    compact: bool = False,
    stop_at_first: bool = False,
    watched: frozenset[int] | None = None,
    limits: Limits | None = None,
    device: str | None = None,
    progress: Progress | None = None,
) -> CheckResult:
    """Check ``machine`` with ``workers`` processes; the caller (every process, under torchrun) gets the result."""
    options: dict[str, Any] = {
        "symmetry": symmetry,
        "compact": compact,
        "stop_at_first": stop_at_first,
        "watched": watched,
        "limits": limits,
        "progress": progress,
    }
    if "WORLD_SIZE" in os.environ and "RANK" in os.environ:
        world = int(os.environ["WORLD_SIZE"])
        if world != workers:
            raise UsageError(f"--workers {workers}, but torchrun started {world} processes")
        return _run_rank(int(os.environ["RANK"]), world, None, machine, engine, device, options)
    import torch.multiprocessing as multiprocessing

    address = f"tcp://127.0.0.1:{_free_port()}"
    context = multiprocessing.get_context("spawn")
    child_options = {key: value for key, value in options.items() if key != "progress"}
    children = [
        context.Process(
            target=_worker,
            args=(rank, workers, address, machine, engine, device, child_options, os.getpid()),
            daemon=True,
        )
        for rank in range(1, workers)
    ]
    for child in children:
        child.start()
    try:
        result = _run_rank(0, workers, address, machine, engine, device, options)
    except KeyboardInterrupt:
        result = CheckResult(
            machine,
            engine,
            [
                PropertyResult(prop.name, prop.kind, Verdict.INCONCLUSIVE, None, "interrupted", prop.builtin)
                for prop in machine.properties
            ],
            Statistics(None, None),
            "interrupted",
        )
    finally:
        for child in children:
            child.join(timeout=5)
            if child.is_alive():
                child.terminate()
    failed = [child.exitcode for child in children if child.exitcode not in (0, None)]
    if failed:
        raise RuntimeError(f"a search process failed (exit codes {failed})")
    return result


__all__ = ["PartitionedSearch", "check_distributed"]
