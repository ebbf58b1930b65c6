"""The vectorised BFS partitioned across processes with torch.distributed (``--workers N``).

Every process owns the states whose fingerprint is its rank modulo the number of processes. A
level is expanded where its states live; the distinct successors are sent to their owners with
one ``all_to_all_single`` (gloo on CPU, NCCL for ``bfs-gpu`` on GPUs, a tensor per level) with
their discovery keys, and each owner keeps the ones it has not seen: the next level. A state's
global id is its local index times the number of processes plus the owner's rank, so parent
links cross processes. After each
level the processes agree (one small ``all_gather_object``) on the totals and on whether to stop:
a limit on any process, the first violation with ``stop_at_first``, every property decided, or
a stop asked of rank 0 (Ctrl-C). At the end the processes share the parent links and the
findings, and each rebuilds the shortest counterexamples as the one-process engine does; the
counts equal the one-process engine's.

``check_distributed`` either joins the job ``torchrun`` started (``WORLD_SIZE``/``RANK`` set;
every process returns the result) or starts ``workers`` search processes itself and supervises
them from the calling process, which takes no part in the search:

- Only the loopback interface: the supervisor binds the rendezvous store's socket to 127.0.0.1
  and hands it to rank 0, and gloo is told to use ``lo`` (``GLOO_SOCKET_IFNAME``, unless set),
  as the runtime's launcher does: the processes exchange pickles, so nothing else may connect.
- Ctrl-C: the workers ignore it (a terminal sends it to the whole process group); the supervisor
  asks rank 0 to stop, the processes agree on it at the end of the level, and the result is the
  one-process engine's for an interrupted search (``stopped`` "interrupted", the states so far).
  A second Ctrl-C stops them at once, with the figures of the last level.
- SIGTERM (``Terminated`` under the CLI) and any other exception in the supervisor: every worker
  is killed and waited for before it propagates.
- A worker that dies: ``WorkerLost`` names it, its process id and the signal (the CLI's exit 4);
  an error a worker reports is raised by the supervisor. A worker ends itself when its parent is
  gone (``_watch_parent``).
"""

from __future__ import annotations

import dataclasses
import datetime
import multiprocessing
import os
import pickle
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any, cast

import numpy as np

from lockstep.checkers.explicit.search import FIRST_VIOLATION, Progress, first_violation, property_verdict
from lockstep.checkers.limits import Limits, LimitWatch
from lockstep.checkers.result import CheckResult, Statistics
from lockstep.checkers.vector.backend import Backend, make_backend
from lockstep.checkers.vector.search import VectorSearch, _Found
from lockstep.loopback import LOOPBACK, loopback_environment, loopback_store
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import UsageError

STORE_SECONDS = 300  # how long a worker waits to reach the rendezvous store
SUPERVISOR_POLL_SECONDS = 0.2  # how often the supervisor looks at its Ctrl-C count between messages
SETTLE_SECONDS = 10.0  # how long the other workers get to end once one failed, or after the result


class PartitionedSearch(VectorSearch):
    """One process's part of a partitioned search (the process group is already initialised)."""

    def __init__(
        self,
        machine: Machine,
        backend: Backend,
        *,
        rank: int,
        world: int,
        stop_requested: Callable[[], bool] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(machine, backend, **options)
        self.stop_requested = stop_requested  # asked (between levels) whether to stop: "interrupted"
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
        if local_stop is None and self.stop_requested is not None and self.stop_requested():
            local_stop = "interrupted"
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


class WorkerLost(RuntimeError):
    """A search process of ``check --workers`` died without reporting an error (killed by a signal,
    say): the check has no result. The message names the worker, its process id and how it ended."""


@dataclass
class _Worker:
    """One search process as the supervisor sees it: its rank, process and end of their pipe."""

    rank: int
    process: BaseProcess
    channel: Connection
    open: bool = True  # the pipe has not reached its end
    error: BaseException | None = None  # what it reported before it exited with status 1

    def __str__(self) -> str:
        return f"worker {self.rank} (pid {self.process.pid})"


class _Interrupts:
    """Counts Ctrl-C (SIGINT) while installed (the main thread only): the supervisor asks rank 0 to
    stop at the end of its level on the first, and stops the processes at once on the second."""

    def __init__(self) -> None:
        self.count = 0
        self._previous: Any = None
        self._installed = False

    def _note(self, number: int, frame: FrameType | None) -> None:
        self.count += 1

    def __enter__(self) -> _Interrupts:
        try:
            self._previous = signal.signal(signal.SIGINT, self._note)
        except ValueError:  # not the main thread: no Ctrl-C reaches this check
            return self
        self._installed = True
        if self._previous == signal.SIG_IGN:  # Ctrl-C was ignored here (a background job): it stays so
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        return self

    def __exit__(self, *exception: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)


@contextmanager
def _signals_blocked() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM back from this thread while it starts workers: a worker starts with
    them blocked (the mask survives ``exec``) until it has set its own handling (``_worker``), so a
    terminal's Ctrl-C never interrupts one while it starts. (multiprocessing unblocks them when it
    starts its resource tracker: ``check_distributed`` has it started first.)"""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _watch_parent(parent: int) -> None:
    """End this worker when the process that started it is gone (it was killed, say)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(1)


def _store(rank: int, world: int, port: int, listener: socket.socket | None) -> Any:
    """The rendezvous store: rank 0 serves it on ``listener``, the socket the supervisor bound to
    127.0.0.1 (a store that binds its own port listens on every interface); the others connect."""
    import torch.distributed as distributed

    wait = datetime.timedelta(seconds=STORE_SECONDS)
    if listener is None:
        return distributed.TCPStore(LOOPBACK, port, world, False, wait)
    store = distributed.TCPStore(LOOPBACK, port, world, True, wait, master_listen_fd=listener.fileno())
    listener.detach()  # the store owns the socket now
    return store


def _portable(error: BaseException) -> BaseException:
    """``error`` if it survives pickling (to the supervisor), else a ``RuntimeError`` saying what it was."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # noqa: BLE001 - any failure to pickle: the description travels instead
        return RuntimeError(f"{type(error).__name__}: {error}")
    return error


def _worker(
    rank: int,
    world: int,
    port: int,
    listener: socket.socket | None,
    engine: str,
    device: str | None,
    channel: Connection,
    parent: int,
) -> None:
    """One search process, started by ``check_distributed``. It ignores Ctrl-C (the supervisor decides
    how the search stops), ends when its parent is gone, keeps gloo on the loopback interface, reads
    the machine and the options from ``channel``, and sends on it rank 0's progress and result, or
    its own error before it exits with status 1."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})  # blocked by _signals_blocked
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    os.environ.update(loopback_environment(os.environ))
    try:
        machine, options = channel.recv()
        store = _store(rank, world, port, listener)
        if rank != 0:
            _run_rank(rank, world, store, machine, engine, device, options)
            return
        options = {**options, "progress": lambda statistics: channel.send(("progress", statistics))}
        result = _run_rank(0, world, store, machine, engine, device, options, stop_requested=channel.poll)
        channel.send(("result", result))
    except BaseException as error:  # noqa: BLE001 - the supervisor reports it, naming this worker
        try:
            channel.send(("error", _portable(error)))
        except OSError:  # the supervisor is gone
            pass
        sys.exit(1)


def _run_rank(
    rank: int,
    world: int,
    store: Any,
    machine: Machine,
    engine: str,
    device: str | None,
    options: dict[str, Any],
    stop_requested: Callable[[], bool] | None = None,
) -> CheckResult:
    """Join the process group (``store``: lockstep's own rendezvous; None: torchrun's ``env://``) and
    run this rank's part of the search."""
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
    if store is None:
        distributed.init_process_group(backend_name)
    else:
        distributed.init_process_group(backend_name, store=store, rank=rank, world_size=world)
    try:
        search = PartitionedSearch(
            machine,
            make_backend(engine, local_device),
            rank=rank,
            world=world,
            engine=engine,
            stop_requested=stop_requested,
            **options,
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
    kernels: str = "auto",
) -> CheckResult:
    """Check ``machine`` with ``workers`` processes; the caller (every process, under torchrun) gets the result.

    Started here, the processes are watched by the caller (``_supervise``): Ctrl-C gives a partial
    result (``stopped`` "interrupted"), SIGTERM (``Terminated`` under the CLI) unwinds after killing
    them, and a worker that dies raises ``WorkerLost``; no worker outlives this call."""
    shared = limits or Limits()
    options: dict[str, Any] = {
        "symmetry": symmetry,
        "compact": compact,
        "stop_at_first": stop_at_first,
        "watched": watched,
        "kernels": kernels,
        # the memory cap is the job's: each of the processes (one host) keeps to its share
        "limits": dataclasses.replace(shared, max_memory_bytes=max(1, shared.memory_cap() // workers)),
    }
    if "WORLD_SIZE" in os.environ and "RANK" in os.environ:
        world = int(os.environ["WORLD_SIZE"])
        if world != workers:
            raise UsageError(f"--workers {workers}, but torchrun started {world} processes")
        return _run_rank(
            int(os.environ["RANK"]), world, None, machine, engine, device, {**options, "progress": progress}
        )
    machine = machine.finish()  # as the one-process search does; the result names this machine
    context = multiprocessing.get_context("spawn")
    resource_tracker.ensure_running()  # started now: starting it later unblocks the signals below
    team: list[_Worker] = []
    finished = False
    listener = loopback_store()
    port = int(listener.getsockname()[1])
    with _Interrupts() as interrupts:
        try:
            with _signals_blocked():
                for rank in range(workers):
                    ours, theirs = context.Pipe()
                    process = context.Process(
                        target=_worker,
                        args=(
                            rank,
                            workers,
                            port,
                            listener if rank == 0 else None,
                            engine,
                            device,
                            theirs,
                            os.getpid(),
                        ),
                        name=f"lockstep-worker-{rank}",
                        daemon=True,
                    )
                    team.append(_Worker(rank, process, ours))
                    # Small arguments (the machine is sent next): multiprocessing writes them to a pipe
                    # whose reading end it holds meanwhile, so a worker that died before reading them
                    # all would block this call for ever.
                    process.start()
                    theirs.close()
            listener.close()  # rank 0 holds its own copy
            for worker in team:
                try:
                    worker.channel.send((machine, options))
                except OSError:  # the worker is gone: the supervisor reports how it ended
                    pass
            result = _supervise(team, machine, engine, interrupts, progress)
            finished = True
            return result
        finally:
            listener.close()
            _stop(team, finished)


def _supervise(
    team: list[_Worker], machine: Machine, engine: str, interrupts: _Interrupts, progress: Progress | None
) -> CheckResult:
    """Relay rank 0's progress until its result arrives. The first Ctrl-C asks rank 0 to stop (the
    processes agree on it at the end of the level, and the result says "interrupted"); a second one
    returns at once, with the states of the last level reported. A worker that ends otherwise: raise."""
    started = time.monotonic()
    leader = team[0]
    last = Statistics(0, 0)
    asked = False
    while True:
        if interrupts.count > 1:
            last.seconds = time.monotonic() - started
            return _abandoned(machine, engine, last, "interrupted")
        if interrupts.count and not asked:
            asked = True
            try:
                leader.channel.send("stop")
            except OSError:  # rank 0 is gone: its end is reported below
                pass
        waiting: list[Connection | int] = [worker.channel for worker in team if worker.open]
        waiting += [worker.process.sentinel for worker in team if worker.process.exitcode is None]
        wait(waiting, timeout=SUPERVISOR_POLL_SECONDS)  # a Ctrl-C is counted, not raised: look again
        for worker in team:
            for kind, payload in _messages(worker):
                if kind == "progress":
                    last = payload
                    if progress is not None:
                        progress(payload)
                elif kind == "result":
                    payload.machine = machine
                    return cast(CheckResult, payload)
        if any(worker.process.exitcode not in (None, 0) for worker in team):
            raise _failure(team)
        if all(worker.process.exitcode == 0 and not worker.open for worker in team):
            raise RuntimeError("the search processes ended without a result")


def _messages(worker: _Worker) -> Iterator[tuple[str, Any]]:
    """What ``worker`` has sent so far (an error is kept on the worker)."""
    while worker.open and worker.channel.poll():
        try:
            kind, payload = worker.channel.recv()
        except (EOFError, OSError):
            worker.open = False
            return
        if kind == "error":
            worker.error = payload
        else:
            yield kind, payload


def _failure(team: list[_Worker]) -> BaseException:
    """Why the search failed, once a worker ended with a failure: a worker killed by a signal first
    (the others fail when their peer goes), then one that exited without reporting, then the error a
    worker reported (lockstep's own errors as they are, so that the CLI reports them as one process would)."""
    killed = _killed(team)
    if killed is not None:
        return killed
    deadline = time.monotonic() + SETTLE_SECONDS  # the others end too, once a peer is gone
    for worker in team:
        worker.process.join(max(0.0, deadline - time.monotonic()))
    for worker in team:
        for _ in _messages(worker):
            pass
    killed = _killed(team)
    if killed is not None:
        return killed
    for worker in team:
        code = worker.process.exitcode
        if code not in (None, 0) and worker.error is None:
            return WorkerLost(f"{worker} exited with status {code}")
    for worker in team:
        error = worker.error
        if error is not None:
            if type(error).__module__.startswith("lockstep."):
                return error
            return RuntimeError(f"{worker} failed: {type(error).__name__}: {error}")
    return RuntimeError("a search process failed")


def _killed(team: list[_Worker]) -> WorkerLost | None:
    """The first worker a signal killed, if one was."""
    for worker in team:
        code = worker.process.exitcode
        if code is not None and code < 0:
            return WorkerLost(f"{worker} was killed by {_signal_name(-code)}")
    return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _stop(team: list[_Worker], finished: bool) -> None:
    """End every worker: after a result they are leaving on their own (given ``SETTLE_SECONDS``);
    otherwise, or after that, SIGKILL. Each is waited for, so none is left behind."""
    try:
        if finished:
            deadline = time.monotonic() + SETTLE_SECONDS
            for worker in team:
                if worker.process.pid is not None:
                    worker.process.join(max(0.0, deadline - time.monotonic()))
    finally:
        for worker in team:
            if worker.process.pid is not None and worker.process.exitcode is None:
                worker.process.kill()
        for worker in team:
            if worker.process.pid is not None:
                worker.process.join()
            worker.channel.close()


def _abandoned(machine: Machine, engine: str, statistics: Statistics, stopped: str) -> CheckResult:
    """The result of a search stopped before its processes shared their findings: every property
    inconclusive, the figures those of the last level rank 0 reported."""
    properties = [property_verdict(prop, None, "", False, False) for prop in machine.properties]
    return CheckResult(machine, engine, properties, statistics, stopped)


__all__ = ["PartitionedSearch", "WorkerLost", "check_distributed"]
