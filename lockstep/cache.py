"""lockstep's on-disk cache: one private folder per user, every entry signed and verified before use.

What is cached is generated code (the array kernels' Python source, the fused Triton modules, the
compiled C successor loops) and analyses that decide verdicts (BMC's commuting pairs): an entry
that another user could plant, or that a failed write left half-done, would run as the user or
turn a violation into ``holds``. So:

- **One root, private, one setting.** ``$LOCKSTEP_CACHE`` (``ENVIRONMENT``) if set, else the
  user's cache directory (``platformdirs.user_cache_dir("lockstep")``, e.g. ``~/.cache/lockstep``).
  A root lockstep creates is made ``0700``; a root that is not a directory, not owned by this user
  or writable by group or others is refused (``CacheError``, a usage error naming the folder).
  ``LOCKSTEP_CACHE=off`` (``OFF``; a folder named ``off`` is ``./off``) keeps nothing between runs:
  the root is then a private temporary folder of this process, removed when it exits (the Triton
  modules and C libraries still need files to load).
- **Every entry signed.** The root holds a 32-byte key (``key``, ``0600``, made once at random);
  an entry of kind ``K`` named ``STEM`` with suffix ``.EXT`` lives at ``K/STEM.MAC.EXT``, where
  ``MAC`` is an HMAC-SHA-256 (first 128 bits, hex) of its kind, name and bytes under that key.
  ``Store.read`` verifies the MAC of every candidate file before returning its bytes; a file that
  fails (or that a caller's parse, compile or load rejects: ``Store.reject``) is removed with a
  one-line ``CacheEntryRejected`` warning and the caller regenerates and writes it again. No
  switch turns the verification off.
- **Whole writes.** ``Store.write`` fills a temporary file created exclusively in the kind's
  folder and renames it into place, so a concurrent reader never sees half an entry and two
  writers of the same entry write the same name with the same bytes.
- ``python -m lockstep.cache install ROOT KIND STEM SUFFIX FILE`` signs and installs a file a
  background process made (the C compiler's library, which may finish after the search).
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

_KEY_FILE = "key"
_KEY_BYTES = 32
_MAC_HEX = 32  # 128 bits of the HMAC in each file name
ENVIRONMENT = "LOCKSTEP_CACHE"  # the one setting: the cache root, or OFF
OFF = "off"
_temporary_root: Path | None = None  # LOCKSTEP_CACHE=off: this process's private folder


class CacheError(ValueError):
    """The cache folder cannot be trusted or used; the message names it and says what to do."""


class CacheEntryRejected(UserWarning):
    """A cache entry failed its verification (or its parse, compile or load) and was removed."""


def enabled() -> bool:
    """Whether entries are kept between runs (``LOCKSTEP_CACHE=off`` says no)."""
    return os.environ.get(ENVIRONMENT) != OFF


def configured_root() -> Path:
    """The folder the environment names for the cache (not checked, not created)."""
    configured = os.environ.get(ENVIRONMENT)
    if configured and configured != OFF:
        return Path(configured).expanduser()
    import platformdirs  # noqa: PLC0415 - only where a cache is used

    return Path(platformdirs.user_cache_dir("lockstep", appauthor=False))


def _check_private(folder: Path, what: str) -> None:
    """A ``CacheError`` unless ``folder`` is a directory of this user that nobody else can write."""
    try:
        status = folder.stat()
    except OSError as error:
        raise CacheError(f"{what} {folder}: {error.strerror or error}") from None
    hint = "use a folder of your own (LOCKSTEP_CACHE=DIR) or remove it to let lockstep make it again"
    if not stat.S_ISDIR(status.st_mode):
        raise CacheError(f"{what} {folder} is not a directory; {hint}")
    if hasattr(os, "geteuid") and status.st_uid != os.geteuid():
        raise CacheError(f"{what} {folder} belongs to user id {status.st_uid}, not to you: refused; {hint}")
    if status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        mode = stat.S_IMODE(status.st_mode)
        raise CacheError(f"{what} {folder} can be written by others (mode {mode:04o}): refused; {hint}")


def private_folder(folder: Path) -> Path:
    """``folder``, made ``0700`` (with its parents) if missing, once it is checked to be private."""
    if not folder.exists():
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass  # another process made it first: checked below like any other
        except OSError as error:
            raise CacheError(f"cache folder {folder}: {error.strerror or error}; set LOCKSTEP_CACHE=DIR") from None
    _check_private(folder, "cache folder")
    return folder


def root() -> Path:
    """The checked cache root (made ``0700`` if missing); a ``CacheError`` if it cannot be trusted."""
    global _temporary_root
    if not enabled():
        if _temporary_root is None or not _temporary_root.is_dir():
            _temporary_root = Path(tempfile.mkdtemp(prefix="lockstep-cache-"))
            atexit.register(shutil.rmtree, _temporary_root, True)
        return _temporary_root
    return private_folder(configured_root())


def _key(folder: Path) -> bytes:
    """The root's signing key, made at random (exclusively, ``0600``) on first use."""
    path = folder / _KEY_FILE
    if not path.exists() and not path.is_symlink():  # made whole, then linked: a reader never sees half a key
        try:
            descriptor, temporary = tempfile.mkstemp(prefix=".key.", dir=folder)  # 0600
            with os.fdopen(descriptor, "wb") as file:
                file.write(secrets.token_bytes(_KEY_BYTES))
            try:
                os.link(temporary, path)
            except FileExistsError:
                pass  # another process made it first: that one is the key
            finally:
                os.unlink(temporary)
        except OSError as error:
            raise CacheError(f"cache key {path}: {error.strerror or error}") from None
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(descriptor, "rb") as file:
            status = os.fstat(file.fileno())
            key = file.read(_KEY_BYTES + 1)
    except OSError as error:
        raise CacheError(f"cache key {path}: {error.strerror or error}; remove it to make a new one") from None
    if (hasattr(os, "geteuid") and status.st_uid != os.geteuid()) or status.st_mode & 0o077:
        raise CacheError(f"cache key {path} is not private to you (mode {stat.S_IMODE(status.st_mode):04o}): refused")
    if len(key) != _KEY_BYTES:
        raise CacheError(f"cache key {path} is not {_KEY_BYTES} bytes long; remove it to make a new one")
    return key


@dataclass(frozen=True)
class Entry:
    """A verified entry: its file and the bytes its MAC was checked over."""

    path: Path
    data: bytes


@dataclass(frozen=True)
class Store:
    """The entries of one kind (``kernels``, ``fused``, ``native``, ``bmc-commuting-pairs``) under a root."""

    kind: str
    base: Path | None = None  # the root; None: ``root()`` at each use

    def folder(self) -> Path:
        """The kind's folder (made ``0700`` when missing), under a root checked to be private."""
        top = private_folder(self.base) if self.base is not None else root()
        return private_folder(top / self.kind)

    def _mac(self, key: bytes, name: str, data: bytes) -> str:
        message = self.kind.encode() + b"\0" + name.encode() + b"\0" + data
        return hmac.new(key, message, hashlib.sha256).hexdigest()[:_MAC_HEX]

    def read(self, stem: str, suffix: str) -> Entry | None:
        """The verified entry ``stem``/``suffix``, or None when there is none. Files under that name
        whose MAC does not verify are removed (with a ``CacheEntryRejected`` warning)."""
        folder = self.folder()
        key = _key(folder.parent)
        pattern = re.compile(re.escape(stem) + rf"\.([0-9a-f]{{{_MAC_HEX}}})" + re.escape(suffix))
        try:
            names = [path.name for path in folder.iterdir()]
        except OSError:
            return None
        for name in sorted(names):
            found = pattern.fullmatch(name)
            if found is None:
                continue
            path = folder / name
            try:
                descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
                with os.fdopen(descriptor, "rb") as file:
                    if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                        raise OSError("not a regular file")
                    data = file.read()
            except OSError as error:
                self.reject(path, f"it cannot be read ({getattr(error, 'strerror', None) or error})")
                continue
            if hmac.compare_digest(found[1], self._mac(key, stem + suffix, data)):
                return Entry(path, data)
            self.reject(path, "its signature does not verify")
        return None

    def write(self, stem: str, suffix: str, data: bytes) -> Path | None:
        """Sign and keep ``data`` as ``stem``/``suffix``; its path, or None when the folder cannot
        be written (the entry is then made again next time)."""
        try:
            folder = self.folder()
            path = folder / f"{stem}.{self._mac(_key(folder.parent), stem + suffix, data)}{suffix}"
            descriptor, temporary = tempfile.mkstemp(prefix=f".{stem}.", suffix=".partial", dir=folder)
        except (OSError, CacheError):
            return None
        try:
            with os.fdopen(descriptor, "wb") as file:
                file.write(data)
            os.replace(temporary, path)
        except OSError:
            Path(temporary).unlink(missing_ok=True)
            return None
        return path

    def reject(self, path: Path, why: str) -> None:
        """Remove the entry at ``path`` (it is made again) with a one-line warning saying why."""
        try:
            if path.is_symlink() or not path.is_dir():
                path.unlink(missing_ok=True)
        except OSError:
            pass
        warnings.warn(f"cache entry {path}: {why}; removed and made again", CacheEntryRejected, stacklevel=2)


def _install(arguments: list[str]) -> int:
    """``install ROOT KIND STEM SUFFIX FILE``: sign FILE into ROOT's KIND store and remove FILE."""
    if len(arguments) != 6 or arguments[0] != "install":
        sys.stderr.write("usage: python -m lockstep.cache install ROOT KIND STEM SUFFIX FILE\n")
        return 2
    base, kind, stem, suffix, file = arguments[1:]
    source = Path(file)
    try:
        written = Store(kind, Path(base)).write(stem, suffix, source.read_bytes())
    except (OSError, CacheError):
        written = None
    finally:
        source.unlink(missing_ok=True)
    return 0 if written is not None else 1


if __name__ == "__main__":
    sys.exit(_install(sys.argv[1:]))


__all__ = [
    "ENVIRONMENT",
    "OFF",
    "CacheEntryRejected",
    "CacheError",
    "Entry",
    "Store",
    "configured_root",
    "enabled",
    "private_folder",
    "root",
]
