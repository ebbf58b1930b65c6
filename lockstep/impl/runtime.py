"""Shared pieces of every runtime process: the run's configuration, status board, trace recorder,
input queue and socket endpoints. Imports no torch (the coordinator and client processes use it).

- ``RunConfig``: everything a process of a run needs, as JSON (the launcher writes it; under
  torchrun rank 0 builds it from its flags and sends it to the others).
- ``StatusBoard``: one small file per process in the run directory, rewritten in place with one
  ``pwrite`` on every change: what the process is blocked in (``all_reduce(worker_dp)#41``,
  ``receive(input_queue)``), since when, and its step and event counts. The launcher reads
  these to name what each rank waits in when it diagnoses a hang.
- ``Recorder``: the process's trace file (``<actor>.jsonl``, ``rank:0`` written ``rank-0``): the
  one recorder core, ``lockstep.traces.recorder.EventRecorder`` (message clocks and collective
  sequence numbers included), with its counts on the status board; with no trace directory it
  only counts.
- ``InputQueue``: an engine's input queue; a batch of messages is appended atomically.
- ``listen``/``connect``: ``multiprocessing.connection`` sockets (FIFO per connection) with a
  hello message naming the connecting actor.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Client, Connection, Listener, wait
from pathlib import Path
from typing import Any, Self

from lockstep.models import POST_FIX, get_protocol
from lockstep.spec.vocabulary import Vocabulary
from lockstep.traces import JSONValue, TraceHeader, TraceSource
from lockstep.traces.output import safe_name
from lockstep.traces.recorder import EventRecorder, RawObject, trace_file_name

STATUS_SIZE = 1024
AUTHKEY_ENVIRONMENT = "LOCKSTEP_RUN_AUTHKEY"


@dataclass
class RunConfig:
    """One run of any protocol: its variant and scenario, ranks, and where files go. What belongs to
    one protocol (its settings, ``--set NAME=VALUE``, which the protocol's ``RuntimeProtocol.settings``
    declares and bounds; a reproduction's schedule) is in ``extra``; a protocol reads its own through
    a typed view of its own (dp-pause: ``lockstep.impl.dp_pause.parameters.DpPauseConfig``)."""

    protocol: str = ""
    variant: str = POST_FIX
    scenario: str = ""  # "": the protocol's first
    ranks: int = 2
    backend: str = "gloo"
    seed: int = 0
    timeout: float = 10.0
    trace_dir: str | None = None
    run_dir: str = ""
    choices: str | None = None  # a JSON Lines file of choices to feed (ScriptedChoices), else seeded
    monitored: bool = False  # True: a launcher watches the statuses (else rank 0 does)
    flight_recorder: bool = False  # each rank dumps torch's flight recorder beside its trace on a hang
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Self:
        return cls(**dict(value))

    def write(self, path: str | os.PathLike[str]) -> None:
        """The config as JSON at ``path``; a refused write (``ENOSPC``...) is an ``OSError`` naming it."""
        try:
            Path(path).write_text(json.dumps(self.to_json()), encoding="utf-8")
        except OSError as error:
            raise OSError(error.errno, f"cannot write the run's config: {error.strerror}", os.fspath(path)) from None

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Self:
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))


# ------------------------------------------------------------------------------------ status board
class StatusBoard:
    """This process's status file, rewritten in place (one pwrite per change)."""

    def __init__(self, run_dir: str | os.PathLike[str], actor: str) -> None:
        self.actor = actor
        self.path = Path(run_dir) / "status" / (safe_name(actor) + ".json")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self._lock = threading.Lock()
        self.state, self.what, self.since = "starting", "", time.time()
        self.counters: dict[str, int] = {}
        self.update("starting")

    def update(self, state: str, what: str = "", **counters: int) -> None:
        """state: starting | running | collective | receive | done | failed | timed_out."""
        with self._lock:
            self.state, self.what, self.since = state, what, time.time()
            self.counters.update(counters)
            self._write()

    def count(self, **counters: int) -> None:
        with self._lock:
            self.counters.update(counters)

    def _write(self) -> None:
        record = {
            "actor": self.actor,
            "pid": os.getpid(),
            "state": self.state,
            "what": self.what,
            "since": self.since,
            **self.counters,
        }
        data = json.dumps(record).encode("utf-8")[: STATUS_SIZE - 1]
        try:
            os.pwrite(self._descriptor, data + b" " * (STATUS_SIZE - len(data)), 0)
        except OSError as error:  # a write on a descriptor names no file: this one does
            raise OSError(error.errno, f"cannot write the status board: {error.strerror}", str(self.path)) from None

    def close(self) -> None:
        with self._lock:
            self._write()
            os.close(self._descriptor)


def read_statuses(run_dir: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Every process's latest status, by actor (a file caught mid-write is read again)."""
    statuses: dict[str, dict[str, Any]] = {}
    folder = Path(run_dir) / "status"
    if not folder.is_dir():
        return statuses
    for path in sorted(folder.glob("*.json")):
        for _ in range(5):
            try:
                record = json.loads(path.read_bytes().decode("utf-8").strip() or "null")
            except (ValueError, OSError):
                time.sleep(0.001)
                continue
            if isinstance(record, dict):
                statuses[str(record["actor"])] = record
            break
    return statuses


# --------------------------------------------------------------------------------------- recorder
class Recorder(EventRecorder):
    """Trace events of one runtime process (``lockstep.traces.recorder.EventRecorder``, the one
    recorder core), its event count and trace-writing time mirrored on its status board; with no
    trace directory it only counts. Every event is checked against the model's ``vocabulary``
    (derived from the model of the run's variant at the header's parameters), file or not; the
    runtime names observed entries through it (``vocabulary.entry("mode", rank)``)."""

    vocabulary: Vocabulary

    def __init__(self, config: RunConfig, actor: str, parameters: Mapping[str, JSONValue], source: TraceSource) -> None:
        path = None if config.trace_dir is None else Path(config.trace_dir) / trace_file_name(actor)
        self.vocabulary = Vocabulary.of(get_protocol(config.protocol), config.variant, parameters)
        header = TraceHeader(config.protocol, config.variant, config.scenario, parameters, source)
        super().__init__(actor, path, header, vocabulary=self.vocabulary)
        self.status: StatusBoard | None = None  # gets the event count

    def record(
        self,
        action: str,
        args: Mapping[str, JSONValue] | None = None,
        observed: Mapping[str, JSONValue] | RawObject | None = None,
        clock: Mapping[str, int] | None = None,
        actor: str | None = None,
        flush: bool = True,
    ) -> None:
        super().record(action, args, observed, clock, actor, flush)
        if self.status is not None:
            self.status.counters["events"] = self.events
            self.status.counters["trace_ns"] = self.write_nanoseconds


# ------------------------------------------------------------------------------------ input queue
class InputQueue:
    """An engine's input queue; ``put_many`` appends a batch atomically.

    ``held()`` keeps batches out while the holder checks the queue and records what it decides:
    ``put_many``'s ``announce`` (recording the arrivals) runs under the same lock, so a trace never
    shows a message arriving between an engine finding its queue empty and the step it records."""

    def __init__(self) -> None:
        self._items: collections.deque[Any] = collections.deque()
        self._condition = threading.Condition()  # reentrant: get_nowait and empty work while held

    def held(self) -> threading.Condition:
        return self._condition

    def put_many(self, items: Iterable[Any], announce: Callable[[], None] | None = None) -> None:
        with self._condition:
            if announce is not None:
                announce()
            self._items.extend(items)
            self._condition.notify_all()

    def get(self) -> Any:
        """The oldest message, waiting for one."""
        with self._condition:
            while not self._items:
                self._condition.wait()
            return self._items.popleft()

    def get_nowait(self) -> Any | None:
        with self._condition:
            return self._items.popleft() if self._items else None

    def empty(self) -> bool:
        with self._condition:
            return not self._items


# -------------------------------------------------------------------------------------- sockets
def authkey() -> bytes:
    return bytes.fromhex(os.environ[AUTHKEY_ENVIRONMENT])


def listen(host: str) -> Listener:
    """A listening socket on ``host`` at a free port."""
    return Listener((host, 0), authkey=authkey())


def connect(address: tuple[str, int], actor: str) -> Connection:
    """A connection to ``address``, introduced by a hello naming ``actor``."""
    deadline = time.time() + 60
    while True:
        try:
            connection = Client(address, authkey=authkey())
            break
        except ConnectionRefusedError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    connection.send({"hello": actor})
    return connection


def ready(connections: Iterable[Connection], timeout: float | None = None) -> list[Connection]:
    """The connections with a message (or end of file) waiting, within ``timeout`` seconds."""
    return [connection for connection in wait(list(connections), timeout) if isinstance(connection, Connection)]


def receive(connection: Connection) -> Any:
    """The next message on ``connection`` (a dict, as every process of a run sends)."""
    return connection.recv()


def announce(address: object) -> None:
    """Tell the parent process where this process listens: one JSON line on stdout."""
    sys.stdout.write(json.dumps(list(address) if isinstance(address, tuple) else address) + "\n")
    sys.stdout.flush()


def accept(listener: Listener, expected: Iterable[str]) -> dict[str, Connection]:
    """Accept one connection from each expected actor; keyed by the actor its hello names."""
    wanted = set(expected)
    connections: dict[str, Connection] = {}
    while wanted - set(connections):
        connection = listener.accept()
        hello = connection.recv()
        actor = str(hello["hello"])
        if actor not in wanted:
            raise RuntimeError(f"unexpected connection from {actor!r}")
        connections[actor] = connection
    return connections
