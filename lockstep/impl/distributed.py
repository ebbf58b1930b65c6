"""torch.distributed for the runtime: torchrun-compatible initialisation and traced collectives.

``initialize`` joins the ranks with ``env://`` (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, as
torchrun sets them); under lockstep's launcher (``LOCKSTEP_STORE`` set) rank 0 serves the
rendezvous store on the socket the launcher bound to 127.0.0.1 and handed down. The default
group is gloo (it carries start-up object exchange). ``Groups.create`` makes a named group with
a backend; every group gets the run's hang timeout. An NCCL group is bound to the rank's device
(``new_group(device_id=)``), so torch creates its communicator eagerly, at set-up, where every rank
joins it: otherwise ProcessGroupNCCL creates a group's communicator on its first collective (and
a separate two-rank one for single send/recv), and a rank whose first collective its peers never
post blocks inside communicator initialisation, before the flight recorder records the op. A
group that carries only the runtime's own plumbing (no model communicator) is created with
``runtime_only=True`` and declared so in ``flight-recorder-mapping.json``. Only APIs present in
both torch 2.11 and 2.13 are used (``init_process_group``, ``new_group(backend=, timeout=,
device_id=)``, ``all_reduce``, ``broadcast_object_list``, ``destroy_process_group``).

``Collective.all_reduce`` is one real collective of one member: its ``enter`` event (communicator,
op, per-communicator sequence number in ``clock``) is written and flushed, and the status board
says what the process is blocked in, **before** the blocking call; its ``complete`` event follows.
With NCCL the call returns on the CPU at once, so the result is copied to the host, which blocks
until the op completes (the same place the core thread of vLLM blocks in ``execute_model``).
"""

from __future__ import annotations

import datetime
import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from lockstep.impl.runtime import Recorder, RunConfig, StatusBoard


class CollectiveTimeout(RuntimeError):
    """A collective that raised after blocking for (about) the hang timeout: the rank is hung in it."""


@dataclass
class Groups:
    """The process groups of one rank, by communicator name, with their backends."""

    rank: int
    world_size: int
    timeout: float
    device: torch.device
    groups: dict[str, Any] = field(default_factory=dict)
    backends: dict[str, str] = field(default_factory=dict)
    runtime_only: set[str] = field(default_factory=set)  # groups that are no model communicator

    def create(self, name: str, backend: str, runtime_only: bool = False) -> None:
        """A group of every rank (collective over all ranks: each rank calls it in the same order).

        An NCCL group is bound to this rank's device, so its communicator is initialised now (eager
        init; its send/recv then use it too) and not lazily inside the first collective, where a rank
        waiting for peers that never come leaves no flight-recorder entry. Gloo groups are unchanged."""
        timeout = datetime.timedelta(seconds=self.timeout)
        ranks = list(range(self.world_size))
        if backend == "nccl" and self.device.type == "cuda":
            self.groups[name] = dist.new_group(ranks, backend=backend, timeout=timeout, device_id=self.device)
        else:
            self.groups[name] = dist.new_group(ranks, backend=backend, timeout=timeout)
        self.backends[name] = backend
        if runtime_only:
            self.runtime_only.add(name)


def initialize(timeout: float, uses_cuda: bool) -> Groups:
    """Join the default (gloo) group from the environment; the caller creates the named groups."""
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cpu")
    if uses_cuda:
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    delta = datetime.timedelta(seconds=timeout)
    if os.environ.get("LOCKSTEP_STORE"):  # started by lockstep's launcher or pool: our own store
        dist.init_process_group("gloo", store=_store(rank, world_size), rank=rank, world_size=world_size, timeout=delta)
    else:  # torchrun (or a user's own environment): env://, as torchrun sets it up
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world_size, timeout=delta)
    return Groups(rank, world_size, timeout, device)


def _store(rank: int, world_size: int) -> Any:
    """The rendezvous store: rank 0 serves it on the socket the launcher bound to MASTER_ADDR (so
    it listens there only, not on every interface as a store binding its own port does)."""
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    wait = datetime.timedelta(seconds=300)
    descriptor = os.environ.get("LOCKSTEP_STORE_FD")
    if rank == 0 and descriptor is not None:
        return dist.TCPStore(host, port, world_size, True, wait, master_listen_fd=int(descriptor))
    return dist.TCPStore(host, port, world_size, rank == 0, wait)


def share_object(value: Any, source: int = 0) -> Any:
    """``value`` of rank ``source`` on every rank (over the default gloo group)."""
    holder = [value]
    dist.broadcast_object_list(holder, src=source)
    return holder[0]


def describe_torch(config: RunConfig) -> None:
    """Record torch's version and the device (CUDA's name under NCCL) in the run's config."""
    config.extra.setdefault("torch", torch.__version__)
    if config.backend == "nccl" and torch.cuda.is_available():
        config.extra.setdefault("cuda", torch.version.cuda)
        config.extra.setdefault("device", torch.cuda.get_device_name(int(os.environ.get("LOCAL_RANK", 0))))
    else:
        config.extra.setdefault("device", "cpu")


def issued(work: dist.Work | None) -> dist.Work:
    """The handle of a posted point-to-point op (torch types it optional: None only when this
    process is not a member of the group, which the runtime never asks for)."""
    if work is None:
        raise RuntimeError("a point-to-point op was posted on a group this process is not a member of")
    return work


def join(config: RunConfig) -> Groups:
    """Join the default group (env://) with the run's timeout, on CUDA when the backend is NCCL:
    what every protocol's rank does first (a protocol's ``rank`` module may define its own
    ``join``); the named groups come in its ``run_rank``."""
    # With the flight recorder on, the groups wait 3x the hang timeout, so the hang is diagnosed (and every
    # rank dumps from inside) while the ranks still block in their collectives: a dump taken after gloo's
    # own timeout has raised can block.
    timeout = config.timeout * (3 if config.flight_recorder else 1)
    return initialize(timeout, uses_cuda=config.backend == "nccl")


def leave_together(status: StatusBoard) -> None:
    """Wait for every rank before exiting (a barrier on the default group). vLLM's ranks do not
    exit when a client is done, so a rank must not leave while a peer still waits for it in a
    collective: that peer is hung, and the launcher reports it (the others wait here)."""
    status.update("collective", "barrier(teardown)")
    dist.barrier()
    status.update("running")


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


class Collective:
    """Traced collective ops of one rank on one named group (enter/complete through the recorder core,
    ``lockstep.traces.recorder.EventRecorder.enter``/``complete``, which numbers them)."""

    OPERATIONS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}

    def __init__(self, groups: Groups, name: str, recorder: Recorder, status: StatusBoard) -> None:
        self.name = name
        self.group = groups.groups[name]
        self.device = groups.device if groups.backends[name] == "nccl" else torch.device("cpu")
        self.timeout = groups.timeout
        self.recorder = recorder
        self.status = status
        self._links: dict[str, int] = {}  # point-to-point messages per channel (send/recv)
        self._acks: list[tuple[Any, torch.Tensor]] = []  # ack sends in flight (recv)

    def all_reduce(self, op: str, values: list[int], reduce: str, shape: tuple[int, ...] | None = None) -> list[int]:
        """All-reduce ``values`` (a 1-D int tensor, or ``shape`` filled from them) with ``reduce``;
        ``op`` is the model's name for the op (``forward``, ``sync_sum``, ...)."""
        tensor = torch.tensor(values, dtype=torch.int64, device=self.device)
        if shape is not None:
            tensor = tensor.reshape(shape)
        number = self.recorder.enter(self.name, op)
        what = f"all_reduce({self.name})#{number}"
        self.status.update("collective", what)
        started = time.monotonic()
        try:
            dist.all_reduce(tensor, op=self.OPERATIONS[reduce], group=self.group)
            result = tensor.reshape(-1).tolist()  # with NCCL: blocks until the op completed
        except Exception as error:  # gloo raises when the group's timeout passes
            if time.monotonic() - started >= 0.9 * self.timeout:
                self.status.update("timed_out", what)
                raise CollectiveTimeout(f"{self.status.actor} timed out in {what}: {error}") from error
            raise
        self.status.update("running", "")
        self.recorder.complete(self.name, op, number, flush=False)  # written with the caller's next event
        return [int(value) for value in result]

    # ------------------------------------------------------------------ broadcast and point-to-point
    # Added for pp-broadcast (additive): a broadcast traced like ``all_reduce``, and send/recv whose
    # trace events are the caller's model actions (``Event``) with message clocks, see ``send``.

    def broadcast(
        self, op: str, tensor: torch.Tensor, source: int, posted: Event | None = None, completed: Event | None = None
    ) -> torch.Tensor:
        """Broadcast ``tensor`` from member ``source`` (in place on the others), a blocking call.

        Traced like ``all_reduce``: ``enter`` (``clock[name]`` = this member's collective sequence
        number) written before blocking, ``complete`` after. ``posted`` / ``completed``, when given,
        are the caller's model events written right before ``enter`` / right after ``complete``."""
        if posted is not None:
            self._write(posted, {}, flush=False)  # goes out in one write with the enter
        number = self.recorder.enter(self.name, op)
        what = f"broadcast({self.name})#{number}"
        self.status.update("collective", what)
        started = time.monotonic()
        try:
            dist.broadcast(tensor, src=source, group=self.group)
            _settle(tensor)
        except Exception as error:
            self._raise_timeout(error, what, started)
            raise
        self.status.update("running", "")
        self.recorder.complete(self.name, op, number, flush=completed is None)
        if completed is not None:
            self._write(completed, {})
        return tensor

    def send(self, op: str, tensor: torch.Tensor, destination: int, posted: Event, completed: Event) -> None:
        """Send ``tensor`` to member ``destination``; returns once the receiver holds it.

        Point-to-point ops take no per-communicator sequence number and write no ``enter`` /
        ``complete``: the trace merge's rendezvous rule (a member completes op k only after every
        member entered op k) would tie the transfers of disjoint pairs to each other. Their causal
        edges are messages instead: ``posted`` (written before blocking) carries
        ``send:<name>:<me>><destination>``; the receiver's ``completed`` carries the matching
        ``recv:`` and ``send:<name>:<destination>><me>:ack``, and this side's ``completed`` the
        ack's ``recv:``. The ack is a real one-element message the receiver sends once it holds
        the data, so a send completes when the receiver has the data, as a rendezvous
        (``lockstep.spec.collectives``: a send and its recv complete together) and as the
        sender's trace then says. ``op`` names the op on the status board (``send->1(pp)#3``)."""
        me = dist.get_rank(self.group)
        channel = f"{self.name}:{me}>{destination}"
        number = self._links.get(channel, 0) + 1
        self._links[channel] = number
        what = f"{op}->{destination}({self.name})#{number}"
        self._write(posted, self.recorder.send(channel))
        self.status.update("collective", what)
        started = time.monotonic()
        ack = torch.zeros(1, dtype=torch.int32, device=tensor.device)
        try:
            work = issued(dist.isend(tensor.contiguous(), destination, group=self.group))
            issued(dist.irecv(ack, destination, group=self.group)).wait(self._delta())
            work.wait(self._delta())
            _settle(ack)
        except Exception as error:
            self._raise_timeout(error, what, started)
            raise
        self.status.update("running", "")
        self._write(completed, self.recorder.receive(f"{self.name}:{destination}>{me}:ack"))

    def recv(self, op: str, tensor: torch.Tensor, source: int, posted: Event, completed: Event) -> torch.Tensor:
        """Receive into ``tensor`` from member ``source`` (see ``send`` for the trace); returns it."""
        me = dist.get_rank(self.group)
        channel = f"{self.name}:{source}>{me}"
        number = self._links.get(channel, 0) + 1
        self._links[channel] = number
        what = f"{op}<-{source}({self.name})#{number}"
        self._write(posted, {})
        self.status.update("collective", what)
        started = time.monotonic()
        try:
            issued(dist.irecv(tensor, source, group=self.group)).wait(self._delta())
            _settle(tensor)
        except Exception as error:
            self._raise_timeout(error, what, started)
            raise
        self.status.update("running", "")
        self._write(
            completed, {**self.recorder.receive(channel), **self.recorder.send(f"{self.name}:{me}>{source}:ack")}
        )
        ack = torch.ones(1, dtype=torch.int32, device=tensor.device)
        self._acks = [(work, kept) for work, kept in self._acks if not work.is_completed()]
        self._acks.append((dist.isend(ack, source, group=self.group), ack))
        return tensor

    def finish(self) -> None:
        """Wait for the acks still in flight (call before leaving the group)."""
        for work, _ in self._acks:
            work.wait(self._delta())
        self._acks = []

    def _delta(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.timeout)

    def _write(self, event: Event, clock: dict[str, int], flush: bool = True) -> None:
        merged = {**(event.clock or {}), **clock}
        self.recorder.record(event.action, event.args, event.observed, merged or None, flush=flush)

    def _raise_timeout(self, error: Exception, what: str, started: float) -> None:
        if time.monotonic() - started >= 0.9 * self.timeout:
            self.status.update("timed_out", what)
            raise CollectiveTimeout(f"{self.status.actor} timed out in {what}: {error}") from error


@dataclass(frozen=True)
class Event:
    """A trace event a traced op writes for its caller: a model action, its args, observed values
    and clock entries (the op adds its own message clocks)."""

    action: str
    args: dict[str, Any]
    observed: dict[str, Any] | None = None
    clock: dict[str, int] | None = None


def _settle(tensor: torch.Tensor) -> None:
    """With NCCL an op returns on the CPU at once: wait for the device so the data is there."""
    if tensor.is_cuda:
        torch.cuda.synchronize(tensor.device)
