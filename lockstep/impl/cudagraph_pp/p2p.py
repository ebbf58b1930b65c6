"""Pipeline p2p of one rank: ``isend_tensor_dict`` / ``irecv_tensor_dict`` with Work handles, and the ack.

Mirrors the worker's PP transfer in vLLM (``gpu_worker.py``: ``irecv_tensor_dict`` into fresh
tensors, ``isend_tensor_dict`` whose handles the next ``execute_model`` waits): a dict of tensors
goes as a small metadata tensor (rows, key mask) and then one tensor per key, with real
``torch.distributed.isend``/``irecv`` on the run's ``pp`` group (gloo, or NCCL with ``--backend
nccl``). Receiving allocates **new tensors every step** (the address instability the persistent
buffer exists for).

The ack. The model's ``receive`` completes the sender's isend too: a stage's next step, which
first waits on its send handles, comes after the receiver holds the data. A gloo or NCCL send can
complete earlier (once the payload is out), so the receiver sends a one-element ack after it
holds the data and the sender's send handles include the irecv of that ack: the runtime's send
handles then complete exactly when the model says, and the trace's ``send:``/``recv:`` clocks of
the ack channel are true. This only lengthens the sender's wait; the sender's buffer is not
reused before the handles complete in either case.

Every blocking wait updates the status board (``receive``, ``recv(pp:0>1)#3``) first and raises
``CollectiveTimeout`` after the run's hang timeout, so the launcher names what a hung rank waits in.
Written here rather than as ``Collective.send``/``recv`` in ``lockstep.impl.distributed`` (which
did not have them when this was written); the two can be unified later.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from lockstep.impl.distributed import CollectiveTimeout, Groups
from lockstep.impl.runtime import StatusBoard

META_TAG, ACK_TAG, DATA_TAG = 1, 2, 10


@dataclass
class SendHandles:
    """The Work handles of one isend_tensor_dict, and the irecv of its ack."""

    works: list[Any]
    ack: Any
    tensors: list[torch.Tensor] = field(default_factory=list)  # kept alive until the handles complete


class PipelineLink:
    """One rank's p2p with its neighbour stages on the ``pp`` group."""

    def __init__(self, groups: Groups, keys: tuple[str, ...], hidden_size: int, status: StatusBoard) -> None:
        self.rank, self.size = groups.rank, groups.world_size
        self.group = groups.groups["pp"]
        self.device = groups.device if groups.backends["pp"] == "nccl" else torch.device("cpu")
        self.keys, self.hidden_size = keys, hidden_size
        self.timeout = datetime.timedelta(seconds=groups.timeout)
        self.status = status
        self.pending: SendHandles | None = None
        self.acks_sent: list[Any] = []
        self.sent = self.received = 0

    def _wait(self, work: Any, what: str) -> None:
        self.status.update("receive", what)
        try:
            work.wait(self.timeout)
        except Exception as error:
            self.status.update("timed_out", what)
            raise CollectiveTimeout(f"{self.status.actor} timed out in {what}: {error}") from error
        self.status.update("running", "")

    def isend_tensor_dict(self, tensors: dict[str, torch.Tensor]) -> None:
        """Send ``tensors`` to the next stage; the handles are waited by ``wait_sends``."""
        destination = self.rank + 1
        rows = next(iter(tensors.values())).shape[0]
        mask = sum(1 << position for position, key in enumerate(self.keys) if key in tensors)
        meta = torch.tensor([rows, mask], dtype=torch.int64, device=self.device)
        payload = [tensors[key].contiguous() for key in self.keys if key in tensors]
        works = [dist.isend(meta, destination, group=self.group, tag=META_TAG)]
        works += [
            dist.isend(tensor, destination, group=self.group, tag=DATA_TAG + position)
            for position, tensor in enumerate(payload)
        ]
        ack = torch.zeros(1, dtype=torch.int64, device=self.device)
        self.pending = SendHandles(
            works, dist.irecv(ack, destination, group=self.group, tag=ACK_TAG), [meta, ack, *payload]
        )
        self.sent += 1

    def wait_sends(self) -> bool:
        """Wait on the previous isend's handles (and its ack); True if there were any."""
        if self.pending is None:
            return False
        what = f"send(pp:{self.rank}>{self.rank + 1})#{self.sent}"
        for work in self.pending.works:
            self._wait(work, what)
        self._wait(self.pending.ack, what)
        self.pending = None
        return True

    def irecv_tensor_dict(self) -> dict[str, torch.Tensor]:
        """Receive the previous stage's tensors into fresh tensors (waits until they are here)."""
        source = self.rank - 1
        self.received += 1
        what = f"recv(pp:{source}>{self.rank})#{self.received}"
        meta = torch.zeros(2, dtype=torch.int64, device=self.device)
        self._wait(dist.irecv(meta, source, group=self.group, tag=META_TAG), what)
        rows, mask = (int(value) for value in meta.tolist())
        present = [key for position, key in enumerate(self.keys) if mask >> position & 1]
        received = {key: torch.empty(rows, self.hidden_size, device=self.device) for key in present}
        works = [
            dist.irecv(received[key], source, group=self.group, tag=DATA_TAG + position)
            for position, key in enumerate(present)
        ]
        for work in works:
            self._wait(work, what)
        return received

    def send_ack(self) -> None:
        """Tell the previous stage its isend of this step has been received."""
        done = torch.ones(1, dtype=torch.int64, device=self.device)
        self.acks_sent.append((dist.isend(done, self.rank - 1, group=self.group, tag=ACK_TAG), done))

    def finish(self) -> None:
        """Wait on everything still in flight (the last step's send and the acks)."""
        self.wait_sends()
        for work, _ in self.acks_sent:
            self._wait(work, f"ack(pp:{self.rank}>{self.rank - 1})")
        self.acks_sent.clear()
