"""Where lockstep's own processes listen: the loopback address only. ``loopback_store`` is a listening
socket for a rendezvous store (a store that binds its own port listens on every interface) and
``loopback_environment`` the variables that keep a job's torch.distributed traffic on the loopback
interface; the reference runtime's launcher and the distributed vectorised search both use them."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path

LOOPBACK = "127.0.0.1"  # every listener of a run binds this address only


def loopback_store() -> socket.socket:
    """A listening socket on 127.0.0.1 at a free port, for rank 0's rendezvous store (a store that
    binds its own port listens on every interface)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((LOOPBACK, 0))
    listener.listen(128)
    return listener


def loopback_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """The variables that keep a job's processes on the loopback interface: MASTER_ADDR, and gloo's
    GLOO_SOCKET_IFNAME=lo unless ``environment`` names an interface (or there is no ``lo``)."""
    variables = {"MASTER_ADDR": LOOPBACK}
    if "GLOO_SOCKET_IFNAME" not in environment and Path("/sys/class/net/lo").exists():
        variables["GLOO_SOCKET_IFNAME"] = "lo"
    return variables
