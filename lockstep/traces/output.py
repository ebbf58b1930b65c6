"""Where lockstep writes its outputs and how: safe file names, and whole-file writes that never
leave a half-written or truncated file and never overwrite an input.

- ``safe_name(*parts)``: names from a model or a trace header joined into one file name with
  only letters, digits, ``_``, ``.``, ``-`` and ``+`` (``../../x`` becomes ``..-..-x``), so an
  output named after them stays in the folder it is meant for.
- ``refuse_inputs(target, inputs)``: an ``OutputError`` when ``target`` is one of the inputs.
- ``check_target(target)``: an ``OutputError`` when a directory or a file stands in the way of
  writing ``target``; ``check_trace_target`` also refuses to replace a file that is not a trace
  (``check``/``fuzz`` ask it about ``--trace-out`` before they start).
- ``replacing(target)``: the temporary file behind every such write (the trace writer's too).
  It is made by ``mkstemp`` (a fresh name, created exclusively: a link planted next to the
  target is never followed) and renamed over ``target`` only when complete, so two processes
  writing one output each rename a whole file and the last one wins. The null device, a device
  or a pipe is written in place (a rename would put a file where the device was). A write the
  system refuses (``ENOSPC`` on ``/dev/full``, ``EACCES``, ``EROFS``, a folder that cannot be made)
  is an ``OutputError`` naming ``target``, never the temporary file; on any failure ``target`` is
  untouched (an existing file keeps its content) and the temporary file is removed.
- ``write_atomically(target, write)``: ``write(file)`` fills the temporary file of ``replacing``.
- ``make_directory(target)``: an output folder (``--trace-dir``), made with its parents, or an
  ``OutputError`` naming it (a file in the way, a folder the system refuses to make).
- ``claim_directory(target, refuse)``: that folder, made and held by this process (an exclusive
  ``flock`` on it, gone with the process) until the claim is closed, so two runs never write one
  trace folder: the second is refused (``DirectoryTaken``), as is a folder that ``refuse`` finds
  already holds output (asked once the claim is held, so it cannot change before the run writes);
  ``claim_new_directory(base, refuse)`` the first of ``base``, ``base-2``, ... that it gets (a
  default folder such as ``lockstep-out/<counterexample>-reproduced``); ``holding_traces`` the
  refusal of a folder that holds traces already.
- ``write_output(target, write, inputs)``: the same for a command's ``-o FILE`` (refusing an
  input), or, with no target, into an anonymous temporary file copied to stdout once ``write``
  returns: a writer that streams a large document keeps its memory flat either way, and a failure
  part-way leaves no half document on stdout.
- ``write_stdout(text)``: all of ``text`` to stdout, or ``BrokenPipeError`` when its reader has gone
  (Python's buffered writer returns a short count when a pipe's reader closes part-way, and the text
  layer drops the rest without an error: ``lockstep graph ... | head -c 10`` exited 0).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from lockstep.traces.schema import TRACE_FORMAT

SAFE_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-+")


class OutputError(ValueError):
    """An output that must not or could not be written (it is an input, a directory or a file is
    in its way, the system refused the write); the message names it."""


class DirectoryTaken(OutputError):
    """An output folder another process is writing, or that holds another run's output already."""


def safe_name(*parts: str) -> str:
    """``parts`` joined with ``-``, every other character replaced by ``-``; never starts with ``.``."""
    text = "-".join(parts)
    name = "".join(character if character in SAFE_CHARACTERS else "-" for character in text)
    return "-" + name[1:] if name.startswith(".") else (name or "-")


def _same_file(first: Path, second: Path) -> bool:
    try:
        return first.exists() and second.exists() and os.path.samefile(first, second)
    except OSError:
        return False


def refuse_inputs(target: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]]) -> None:
    """An ``OutputError`` if ``target`` names one of ``inputs`` (the same file, by any path)."""
    path = Path(target)
    for item in inputs:
        if str(item) != "-" and (_same_file(path, Path(item)) or path.resolve() == Path(item).resolve()):
            raise OutputError(f"{target}: the output would overwrite the input {item}; name another file")


def check_target(target: str | os.PathLike[str]) -> None:
    """An ``OutputError`` if a file cannot be written at ``target`` because of what is already
    there: a directory at ``target``, or a file where one of its folders would be."""
    path = Path(target)
    try:
        if path.is_dir():
            raise OutputError(f"{target} is a directory; name a file")
        for folder in path.parents:
            if folder.exists():
                if not folder.is_dir():
                    raise OutputError(f"{target}: {folder} is a file, not a directory")
                return
    except OSError as error:  # a name too long, say
        raise OutputError(f"{target}: {error.strerror or error}") from None


def check_trace_target(target: str | os.PathLike[str]) -> None:
    """``check_target``, and an ``OutputError`` if ``target`` is a file with something in it that is
    not a lockstep trace (a trace or an empty file is replaced; anything else is the user's and is
    left alone)."""
    check_target(target)
    path = Path(target)
    if str(target) == os.devnull or not path.is_file() or path.stat().st_size == 0:
        return  # the null device (a plain file in some containers), a device, an empty file
    try:
        with path.open("rb") as file:
            header = json.loads(file.readline(1 << 16))
    except (OSError, ValueError):
        header = None
    if not isinstance(header, dict) or header.get("format") != TRACE_FORMAT:
        raise OutputError(f"{target} exists and is not a lockstep trace; remove it or name another file")


def _written_in_place(path: Path) -> bool:
    """Whether ``path`` is the null device or exists as something other than a regular file (a
    device, a pipe, a socket): written in place, never replaced."""
    return str(path) == os.devnull or (path.exists() and not path.is_file())


def _refused(target: str | os.PathLike[str], error: OSError, *own: str) -> OutputError | OSError:
    """``error`` as an ``OutputError`` naming ``target`` when it is about the output (no file named,
    or one of ``own``: the target, its temporary file); an error about another file (an input read
    while the output is written) is left as it is."""
    if error.filename is not None and os.fsdecode(error.filename) not in own:
        return error
    return OutputError(f"{target}: cannot write: {error.strerror or error}")


@contextmanager
def replacing(target: str | os.PathLike[str]) -> Iterator[str]:
    """A temporary file next to ``target`` to fill; renamed over ``target`` when the block ends
    normally (with ``target``'s permissions if it exists, else the umask's), removed otherwise. The
    null device, or any target that exists and is no regular file (a device, a pipe), is written in
    place: a rename would replace the device with a file. A write error about the output (the
    block's too) is raised as an ``OutputError`` naming ``target``."""
    path = Path(target)
    check_target(path)
    if _written_in_place(path):
        try:
            yield str(path)
        except OSError as error:
            raise _refused(target, error, str(path)) from None
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    except OSError as error:
        raise OutputError(f"{target}: cannot write: {error.strerror or error}") from None
    os.close(descriptor)
    try:
        yield temporary
        if path.exists():
            os.chmod(temporary, path.stat().st_mode & 0o777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise _refused(target, error, str(path), temporary) from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def make_directory(target: str | os.PathLike[str]) -> Path:
    """``target`` as a directory, made with its parents if missing; an ``OutputError`` naming it when
    something else is there or the system refuses (``EROFS``, ``EACCES``, a folder of ``/proc``)."""
    path = Path(target)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"{target} is not a directory; name a folder") from None
    except OSError as error:
        raise OutputError(f"{target}: cannot make the folder: {error.strerror or error}") from None
    return path


class DirectoryClaim:
    """An output folder this process holds (``claim_directory``); ``close`` (or the ``with`` block's
    end, or the process's) lets it go."""

    def __init__(self, path: Path, descriptor: int) -> None:
        self.path = path
        self._descriptor: int | None = descriptor

    def close(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)  # the flock goes with it
            self._descriptor = None

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exception: object) -> None:
        self.close()


def claim_directory(
    target: str | os.PathLike[str], refuse: Callable[[Path], str | None] = lambda folder: None
) -> DirectoryClaim:
    """``target`` made if missing and held by this process until the claim is closed; a
    ``DirectoryTaken`` naming it when another process holds it or ``refuse(folder)`` says why it
    cannot be used (its words follow the folder's name), an ``OutputError`` when it cannot be made."""
    path = make_directory(target)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise OutputError(f"{target}: cannot open the folder: {error.strerror or error}") from None
    claim = DirectoryClaim(path, descriptor)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        claim.close()
        raise DirectoryTaken(f"{target} is being written by another lockstep process; name another folder") from None
    problem = refuse(path)
    if problem is not None:
        claim.close()
        raise DirectoryTaken(f"{target} {problem}")
    return claim


def claim_new_directory(base: Path, refuse: Callable[[Path], str | None] = lambda folder: None) -> DirectoryClaim:
    """The first of ``base``, ``base-2``, ``base-3``, ... that ``claim_directory`` gets (a default
    output folder: one that another run holds or filled is passed over, one that cannot be made is
    an ``OutputError``)."""
    folder, number = base, 1
    while True:
        try:
            return claim_directory(folder, refuse)
        except DirectoryTaken:
            number += 1
            folder = base.with_name(f"{base.name}-{number}")


def holding_traces(folder: Path) -> str | None:
    """Why a trace folder cannot take a run (a ``refuse`` of ``claim_directory``): it holds traces."""
    return "already holds *.jsonl files; give an empty or new directory" if any(folder.glob("*.jsonl")) else None


def write_atomically(target: str | os.PathLike[str], write: Callable[[IO[str]], object]) -> Path:
    """Fill ``target`` through ``write`` (text, UTF-8, '\\n' line ends) all at once; see the module doc."""
    with replacing(target) as temporary, open(temporary, "w", encoding="utf-8", newline="\n") as file:
        write(file)
    return Path(target)


def write_output(
    target: str | os.PathLike[str] | None,
    write: Callable[[IO[str]], object],
    inputs: Iterable[str | os.PathLike[str]] = (),
) -> None:
    """Fill ``target`` through ``write`` all at once (never over one of ``inputs``), or stdout when
    ``target`` is None: written to a temporary file first, then copied, so a failure prints nothing."""
    if target is not None:
        refuse_inputs(target, inputs)
        write_atomically(target, write)
        return
    with tempfile.TemporaryFile("w+", encoding="utf-8", newline="\n") as spool:
        write(spool)
        spool.seek(0)
        while block := spool.read(1 << 20):
            write_stdout(block)


def write_stdout(text: str) -> None:
    """All of ``text`` to stdout (its encoding), in as many writes as the pipe takes; a reader that
    has gone raises ``BrokenPipeError`` (the commands then stop quietly with 141) instead of the rest
    being dropped. A stdout without a byte buffer (a test's ``StringIO``) takes the text as it is."""
    stream = sys.stdout
    stream.flush()
    buffer = getattr(stream, "buffer", None)
    if buffer is None:
        stream.write(text)
        stream.flush()
        return
    data = memoryview(text.encode(stream.encoding or "utf-8", stream.errors or "strict"))
    while data:
        written = buffer.write(data)
        buffer.flush()
        if not written:  # no progress: stop rather than loop
            raise BrokenPipeError(errno.EPIPE, "stdout took no more bytes")
        data = data[written:]
