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
- ``write_atomically(target, write)``: ``write(file)`` fills a temporary file next to
  ``target``, which is renamed over ``target`` only when complete; on any failure ``target`` is
  untouched (an existing file keeps its content) and the temporary file is removed.
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
    """An output that must not be written (it is an input); the message names it."""


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


@contextmanager
def replacing(target: str | os.PathLike[str]) -> Iterator[str]:
    """A temporary file next to ``target`` to fill; renamed over ``target`` when the block ends
    normally (with ``target``'s permissions if it exists, else the umask's), removed otherwise. The
    null device, or any target that exists and is no regular file (a device, a pipe), is written in
    place: a rename would replace the device with a file."""
    path = Path(target)
    check_target(path)
    if str(target) == os.devnull or (path.exists() and not path.is_file()):
        yield str(path)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
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
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


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
