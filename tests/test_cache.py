"""Tests for lockstep.cache: a private root, signed entries, verified reads.

An entry reads back as written; its signature binds its kind, name and bytes (an entry copied under
another name, or into another kind, does not verify); a file that does not verify is removed with
a warning; many processes making the key at once agree on one whole key; a key or root that others
can reach is refused; ``LOCKSTEP_CACHE=off`` gives a private folder of the process.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from lockstep.cache import CacheEntryRejected, CacheError, Store, _key, root


def test_an_entry_reads_back_and_its_signature_binds_kind_name_and_bytes(tmp_path: Path) -> None:
    store = Store("kernels", tmp_path)
    written = store.write("first", ".json", b"payload")
    assert written is not None and written.parent == tmp_path / "kernels"
    entry = store.read("first", ".json")
    assert entry is not None and entry.data == b"payload" and entry.path == written
    assert store.read("second", ".json") is None
    (tmp_path / "kernels" / written.name.replace("first", "second")).write_bytes(b"payload")  # renamed copy
    with pytest.warns(CacheEntryRejected, match="signature does not verify"):
        assert store.read("second", ".json") is None
    other = Store("native", tmp_path)
    other.folder()
    (tmp_path / "native" / written.name).write_bytes(b"payload")  # the same file in another kind
    with pytest.warns(CacheEntryRejected):
        assert other.read("first", ".json") is None
    assert not (tmp_path / "native" / written.name).exists()


def test_a_link_in_place_of_an_entry_is_not_followed(tmp_path: Path) -> None:
    store = Store("kernels", tmp_path)
    written = store.write("first", ".json", b"payload")
    assert written is not None
    victim = tmp_path / "victim"
    victim.write_bytes(b"payload")
    written.unlink()
    written.symlink_to(victim)
    with pytest.warns(CacheEntryRejected, match="cannot be read"):
        assert store.read("first", ".json") is None
    assert victim.read_bytes() == b"payload" and not written.is_symlink()


def _make_key(folder: str) -> bytes:
    return _key(Path(folder))


def test_processes_making_the_key_at_once_agree_on_one_whole_key(tmp_path: Path) -> None:
    with multiprocessing.get_context("fork").Pool(8) as pool:
        keys = pool.map(_make_key, [str(tmp_path)] * 48)
    assert len(set(keys)) == 1 and len(keys[0]) == 32
    assert (tmp_path / "key").stat().st_mode & 0o777 == 0o600
    assert [path.name for path in tmp_path.iterdir()] == ["key"]  # no temporary file left


def test_a_key_others_can_read_is_refused(tmp_path: Path) -> None:
    _key(tmp_path)
    (tmp_path / "key").chmod(0o644)
    with pytest.raises(CacheError, match="not private to you"):
        _key(tmp_path)


def test_a_root_others_can_write_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_CACHE", str(tmp_path / "made"))
    assert root() == tmp_path / "made" and (tmp_path / "made").stat().st_mode & 0o777 == 0o700
    (tmp_path / "made").chmod(0o757)
    with pytest.raises(CacheError, match="can be written by others"):
        root()
    monkeypatch.setenv("LOCKSTEP_CACHE", str(tmp_path / "file"))
    (tmp_path / "file").write_text("")
    with pytest.raises(CacheError, match="is not a directory"):
        root()


def test_with_the_cache_off_the_root_is_a_private_folder_of_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCKSTEP_CACHE", "off")
    monkeypatch.chdir(tmp_path)
    private = root()
    assert private != tmp_path / "off" and not (tmp_path / "off").exists() and private.stat().st_mode & 0o777 == 0o700
    assert private.stat().st_uid == os.geteuid() and root() == private


def test_the_root_is_one_setting_and_a_folder_named_off_is_written_as_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LOCKSTEP_CACHE", "./off")
    assert root().resolve() == tmp_path / "off" and (tmp_path / "off").stat().st_mode & 0o777 == 0o700
    monkeypatch.delenv("LOCKSTEP_CACHE")
    monkeypatch.setenv("LOCKSTEP_CACHE_DIR", str(tmp_path / "older-name"))  # no longer a setting
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    assert root() == tmp_path / "user-cache" / "lockstep" and not (tmp_path / "older-name").exists()
