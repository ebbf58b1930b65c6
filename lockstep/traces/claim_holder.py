"""Which process holds an output folder that a lockstep run has claimed.

``lockstep.traces.output.claim_directory`` holds a trace folder with an exclusive ``flock`` for
as long as a run writes it. ``claim_holder(folder)`` asks, without taking or making anything,
whether another process holds it and which: the pid that Linux lists for the lock in
``/proc/locks`` (by the folder's device and inode), or None when it is free.
``refuse_claimed(folder, option)`` turns a held folder into a ``DirectoryTaken`` naming the
option, the folder and the holder's pid; a command asks it before it checks the folder's
contents, so a second run is told who writes the folder rather than that it holds traces.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from lockstep.traces.output import DirectoryTaken

LOCKS = Path("/proc/locks")


def _locker(status: os.stat_result) -> int | None:
    """The pid /proc/locks lists for a granted lock on the file of ``status`` (None: none found)."""
    try:
        lines = LOCKS.read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        return None
    wanted = (os.major(status.st_dev), os.minor(status.st_dev), status.st_ino)
    for line in lines:
        fields = line.split()  # "1: FLOCK  ADVISORY  WRITE 4321 00:2d:1234 0 EOF"; "1: -> FLOCK ..." waits
        if len(fields) < 6 or fields[1] == "->":
            continue
        try:
            major, minor, inode = fields[5].split(":")
            if (int(major, 16), int(minor, 16), int(inode)) == wanted:
                return int(fields[4])
        except ValueError:
            continue
    return None


def claim_holder(folder: str | os.PathLike[str]) -> int | None:
    """The pid of the process holding ``folder``'s claim, 0 if it is held by a process whose pid
    cannot be read, or None if nobody holds it (or it is no folder)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _locker(os.fstat(descriptor)) or 0
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        return None
    finally:
        os.close(descriptor)


def refuse_claimed(folder: str | os.PathLike[str], option: str = "--trace-dir") -> None:
    """``DirectoryTaken`` naming ``option``, ``folder`` and the holder's pid when another process holds it."""
    pid = claim_holder(folder)
    if pid is not None:
        holder = f"pid {pid}" if pid else "a process whose pid cannot be read"
        raise DirectoryTaken(
            f"{option} {folder} is being written by another lockstep run ({holder}); wait for it or name another folder"
        )


__all__ = ["claim_holder", "refuse_claimed"]
