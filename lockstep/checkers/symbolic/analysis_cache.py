"""BMC's one-off analyses (the commuting pairs of ``reduction``) kept in lockstep's cache, keyed by a hash.

The key is a SHA-256 of everything the analysis reads (every grounded transition's enabling
condition and updates as Z3 terms, the sort domains, the symmetry used, and a version of the
decision procedure), so a changed model, variant or instance gets a new entry and a stale one is
never read. A wrong pair would let the reduction drop an interleaving and turn a violation into
``holds``, so entries are signed entries of ``lockstep.cache`` (kind ``bmc-commuting-pairs``,
under the user's private cache root unless a folder is given), verified before they are read;
one that fails to verify or parse is removed, with a note, and the analysis runs again and
writes it back. Deleting the folder is always safe.
"""

from __future__ import annotations

import json
from pathlib import Path

from lockstep.cache import CacheError, Store, root

_KIND = "bmc-commuting-pairs"


def default_cache_directory() -> Path:
    """The cache root (``lockstep.cache.root``: ``$LOCKSTEP_CACHE``, else the user's cache folder)."""
    return root()


def read_pairs(directory: Path, key: str) -> list[tuple[int, int]] | None:
    """The verified cached pairs under ``key``, or None when there is no well-formed entry."""
    store = Store(_KIND, directory)
    try:
        entry = store.read(key, ".json")
    except CacheError:
        return None
    if entry is None:
        return None
    try:
        payload = json.loads(entry.data)
        pairs = [(int(first), int(second)) for first, second in payload["pairs"]]
        if payload.get("key") != key:
            raise ValueError("another key")
    except (ValueError, KeyError, TypeError) as error:
        store.reject(entry.path, f"it does not parse ({type(error).__name__})")
        return None
    return pairs


def write_pairs(directory: Path, key: str, pairs: list[tuple[int, int]]) -> None:
    """Sign and store ``pairs`` under ``key`` (nothing is raised when the folder cannot be written)."""
    Store(_KIND, directory).write(key, ".json", json.dumps({"key": key, "pairs": pairs}).encode())
