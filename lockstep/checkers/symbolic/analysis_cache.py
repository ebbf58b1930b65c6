"""An on-disk cache of BMC's one-off analyses (the commuting pairs of ``reduction``), keyed by a hash.

The key is a SHA-256 of everything the analysis reads (every grounded transition's enabling
condition and updates as Z3 terms, the sort domains, the symmetry used, and a version of the
decision procedure), so a changed model, variant or instance gets a new entry and a stale one is
never read. Entries live in ``$LOCKSTEP_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/lockstep``,
else ``~/.cache/lockstep``, under ``bmc-commuting-pairs/<key>.json``. Deleting the folder is
always safe: the analysis runs again and writes it back. An unreadable or malformed entry is
ignored (and overwritten); writes go to a temporary file renamed into place, so a concurrent
reader never sees half a file; a cache folder that cannot be written is skipped silently.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

_FOLDER = "bmc-commuting-pairs"


def default_cache_directory() -> Path:
    """The cache root: ``$LOCKSTEP_CACHE_DIR``, else ``$XDG_CACHE_HOME/lockstep``, else ``~/.cache/lockstep``."""
    configured = os.environ.get("LOCKSTEP_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lockstep"


def read_pairs(directory: Path, key: str) -> list[tuple[int, int]] | None:
    """The cached pairs under ``key``, or None when there is no well-formed entry."""
    try:
        payload = json.loads((directory / _FOLDER / f"{key}.json").read_text())
        pairs = [(int(first), int(second)) for first, second in payload["pairs"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pairs if payload.get("key") == key else None


def write_pairs(directory: Path, key: str, pairs: list[tuple[int, int]]) -> None:
    """Store ``pairs`` under ``key`` (atomically; nothing is raised when the folder is not writable)."""
    folder = directory / _FOLDER
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=folder, suffix=".tmp", delete=False) as handle:
            json.dump({"key": key, "pairs": pairs}, handle)
        os.replace(handle.name, folder / f"{key}.json")
    except OSError:
        return
