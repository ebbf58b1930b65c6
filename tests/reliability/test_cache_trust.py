"""Reliability: code planted in lockstep's cache neither runs nor changes a verdict.

Each kind of cache file (the array kernels' generated source, the fused Triton module and its
generation's result, the compiled C library, BMC's commuting pairs) gets a payload that writes a
marker file when it runs, or (the pairs) that would drop the interleavings of a violation. Each is
planted three ways: over the real entry's file (its name kept), under a name with a forged
signature, and under the name an unsigned cache used. The real ``lockstep`` command then runs: the
marker is never written, the verdict is the pinned one, and a tampered entry is removed with a
one-line note. The control signs the same payload with the cache's own key: then it does run (or
flip the verdict), so each case would fail if verification were missing. The cache folder itself
is refused when it is writable by others or belongs to another user, and ``LOCKSTEP_CACHE=off``
reads nothing from the folder the cache would otherwise be.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from lockstep.cache import Store

LOCKSTEP = Path(sys.executable).parent / "lockstep"
MARKER_CODE = "open({marker!r}, 'w').write('planted code ran')\n"


@dataclass(frozen=True)
class Kind:
    """One kind of cache file: the command that writes and reads it, and how to make a payload."""

    name: str  # the store's kind
    pattern: str  # the entries' file names, as a glob
    command: list[str]
    environment: dict[str, str]
    exit_code: int  # the pinned verdict's exit code
    payload: Callable[[bytes, Path], bytes]  # (the real entry's bytes, the marker) -> planted bytes
    flips: bool = False  # the payload changes the verdict (rather than running code)
    generated: bool = False  # the entry must also equal what the run generates (a signature is not enough)


def _json_source_payload(field: str) -> Callable[[bytes, Path], bytes]:
    def payload(real: bytes, marker: Path) -> bytes:
        document = json.loads(real)
        document[field] = MARKER_CODE.format(marker=str(marker)) + document[field]
        return json.dumps(document).encode()

    return payload


def _module_payload(real: bytes, marker: Path) -> bytes:
    return MARKER_CODE.format(marker=str(marker)).encode() + real


def _library_payload(real: bytes, marker: Path) -> bytes:
    """A shared library whose constructor writes the marker when it is loaded."""
    folder = marker.parent / "library-build"
    folder.mkdir(exist_ok=True)
    source = folder / "planted.c"
    source.write_text(
        "#include <stdio.h>\n"
        "__attribute__((constructor)) static void planted(void) {\n"
        f'  FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("planted code ran", f); fclose(f); }}\n'
        "}\n"
    )
    library = folder / "planted.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)  # noqa: S603, S607
    return library.read_bytes()


def _every_pair_payload(real: bytes, marker: Path) -> bytes:
    """Every two transitions declared commuting: the reduction then drops the violation's paths."""
    document = json.loads(real)
    count = 1 + max(max(pair) for pair in document["pairs"])
    document["pairs"] = [[first, second] for first in range(count) for second in range(count) if first != second]
    return json.dumps(document).encode()


DP_PAUSE_PRE_FIX = ["check", "dp-pause", "--variant", "pre-fix"]
FUSED = {"TRITON_INTERPRET": "1"}
FUSED_CHECK = ["check", "pp-broadcast", "--variant", "pre-fix", "--engine", "bfs-gpu", "--device", "cpu", "--kernels"]
BMC_CHECK = ["check", "pp-broadcast", "--variant", "pre-fix", "--engine", "bmc", "--depth", "12", "--reduction", "por"]
KINDS = [
    Kind("kernels", "*.json", [*DP_PAUSE_PRE_FIX, "--kernels", "arrays"], {}, 1, _json_source_payload("source")),
    Kind("native", "successors_*.so", [*DP_PAUSE_PRE_FIX, "--kernels", "c"], {}, 1, _library_payload),
    Kind("fused", "source_*.json", [*FUSED_CHECK, "triton"], FUSED, 1, _json_source_payload("source")),
    Kind("fused", "fused_*.py", [*FUSED_CHECK, "triton"], FUSED, 1, _module_payload, generated=True),
    Kind("bmc-commuting-pairs", "*.json", BMC_CHECK, {}, 1, _every_pair_payload, flips=True),
]
IDENTIFIERS = ["kernels-source", "native-library", "fused-source", "fused-module", "bmc-commuting-pairs"]


def _run(kind: Kind, cache: Path, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "LOCKSTEP_CACHE": str(cache), **kind.environment, **(extra or {})}
    if "TRITON_INTERPRET" not in kind.environment:
        environment.pop("TRITON_INTERPRET", None)
    return subprocess.run(
        [str(LOCKSTEP), *kind.command], env=environment, capture_output=True, text=True, timeout=600, cwd=cache.parent
    )


def _filled(kind: Kind, tmp_path: Path) -> tuple[Path, list[Path]]:
    """A cache filled by one real run of the kind's command, and the kind's entries in it."""
    if kind.name == "native" and shutil.which("cc") is None:
        pytest.skip("no C compiler")
    if kind.name == "fused":
        pytest.importorskip("triton")
    cache = tmp_path / "cache"
    first = _run(kind, cache)
    assert first.returncode == kind.exit_code, first.stderr[-2000:]
    entries = sorted((cache / kind.name).glob(kind.pattern))
    assert entries, f"the run wrote no {kind.name} entry"
    return cache, entries


def _unchanged(kind: Kind, completed: subprocess.CompletedProcess[str], marker: Path) -> None:
    """The planted payload did not run and the verdict is the pinned one."""
    assert not marker.exists(), "planted code ran"
    assert completed.returncode == kind.exit_code, completed.stdout[-1500:] + completed.stderr[-1500:]
    assert "as pinned" in completed.stdout + completed.stderr
    assert "Traceback" not in completed.stderr


@pytest.mark.parametrize("kind", KINDS, ids=IDENTIFIERS)
def test_a_tampered_entry_is_removed_with_a_note_and_neither_runs_nor_changes_the_verdict(
    kind: Kind, tmp_path: Path
) -> None:
    cache, entries = _filled(kind, tmp_path)
    marker = tmp_path / "marker"
    planted = {entry: kind.payload(entry.read_bytes(), marker) for entry in entries}
    for entry, payload in planted.items():  # the name (and its signature) kept, the content replaced
        entry.write_bytes(payload)
    completed = _run(kind, cache)
    _unchanged(kind, completed, marker)
    assert "lockstep: note: cache entry" in completed.stderr and "signature does not verify" in completed.stderr
    assert not any(entry.exists() and entry.read_bytes() == payload for entry, payload in planted.items())


@pytest.mark.parametrize("kind", KINDS, ids=IDENTIFIERS)
@pytest.mark.parametrize("naming", ["forged-signature", "unsigned"])
def test_a_planted_entry_neither_runs_nor_changes_the_verdict(kind: Kind, naming: str, tmp_path: Path) -> None:
    cache, entries = _filled(kind, tmp_path)
    marker = tmp_path / "marker"
    for entry in entries:
        stem, _, rest = entry.name.partition(".")
        suffix = "." + rest.partition(".")[2]
        planted = kind.payload(entry.read_bytes(), marker)
        entry.unlink()
        name = f"{stem}.{'0' * 32}{suffix}" if naming == "forged-signature" else f"{stem}{suffix}"
        (entry.parent / name).write_bytes(planted)
    _unchanged(kind, _run(kind, cache), marker)


def _signed_plants(kind: Kind, tmp_path: Path) -> tuple[Path, Path]:
    """A filled cache whose entries of ``kind`` are replaced by the payload signed with the cache's
    own key (what a planter cannot do); the cache and the marker the payload writes."""
    cache, entries = _filled(kind, tmp_path)
    marker = tmp_path / "marker"
    for entry in entries:
        stem, _, rest = entry.name.partition(".")
        planted = kind.payload(entry.read_bytes(), marker)
        entry.unlink()
        Store(kind.name, cache).write(stem, "." + rest.partition(".")[2], planted)
    return cache, marker


@pytest.mark.parametrize("kind", KINDS, ids=IDENTIFIERS)
def test_control_the_same_payload_signed_with_the_cache_key_does_take_effect(kind: Kind, tmp_path: Path) -> None:
    """What the cases above stop is real: signed with the cache's own key (which a planter does not
    have), the payload runs or changes the verdict; the fused module is also compared with the
    source the run generated, so even signed it is refused."""
    cache, marker = _signed_plants(kind, tmp_path)
    completed = _run(kind, cache)
    if kind.flips:  # the pinned violation is gone (the report says so: inconclusive is "not settled")
        output = completed.stdout + completed.stderr
        assert completed.returncode != kind.exit_code, output[-1500:]
        assert "DIFFERS from the pinned verdict" in output or "not settled by this check" in output
    elif kind.generated:
        _unchanged(kind, completed, marker)
        assert "is not the generated source it is named after" in completed.stderr
    else:
        assert marker.exists()


def test_with_the_cache_off_nothing_is_read_from_the_cache_folder(tmp_path: Path) -> None:
    """``LOCKSTEP_CACHE=off``: a library planted in the user's cache folder (the root when the setting
    is unset) is not loaded, even signed (the audit found one loaded with the switch on)."""
    kind = KINDS[1]
    cache, marker = _signed_plants(kind, tmp_path)
    user_cache = tmp_path / "user-cache"
    user_cache.mkdir()
    cache.rename(user_cache / "lockstep")  # where platformdirs puts lockstep's cache under XDG_CACHE_HOME
    completed = _run(kind, tmp_path / "unused", {"LOCKSTEP_CACHE": "off", "XDG_CACHE_HOME": str(user_cache)})
    _unchanged(kind, completed, marker)
    assert not (tmp_path / "unused").exists() and not (tmp_path / "off").exists()  # off is no folder name


def test_the_default_cache_is_a_private_folder_of_the_user(tmp_path: Path) -> None:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("LOCKSTEP_CACHE")}
    environment["XDG_CACHE_HOME"] = str(tmp_path / "home-cache")
    completed = subprocess.run(
        [str(LOCKSTEP), *DP_PAUSE_PRE_FIX], env=environment, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert completed.returncode == 1, completed.stderr[-2000:]
    root = tmp_path / "home-cache" / "lockstep"
    assert (root.stat().st_mode & 0o777) == 0o700
    assert (root / "key").stat().st_mode & 0o777 == 0o600
    assert all(path.stat().st_mode & 0o077 == 0 for path in root.iterdir() if path.is_dir())
    assert list((root / "kernels").glob("*.json"))


def _refused(cache: Path, tmp_path: Path, why: str) -> None:
    marker = tmp_path / "marker"
    completed = subprocess.run(
        [str(LOCKSTEP), *DP_PAUSE_PRE_FIX],
        env={**os.environ, "LOCKSTEP_CACHE": str(cache)},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert f"cache folder {cache}" in completed.stderr and why in completed.stderr
    assert "Traceback" not in completed.stderr and not marker.exists()


def test_a_cache_folder_writable_by_others_is_refused(tmp_path: Path) -> None:
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    _refused(cache, tmp_path, "can be written by others (mode 0777)")
    cache.chmod(0o775)
    _refused(cache, tmp_path, "can be written by others (mode 0775)")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to give a folder away")
def test_a_cache_folder_of_another_user_is_refused_also_through_a_link(tmp_path: Path) -> None:
    cache = tmp_path / "theirs"
    cache.mkdir(mode=0o700)
    os.chown(cache, 65534, 65534)  # nobody
    _refused(cache, tmp_path, "belongs to user id 65534")
    link = tmp_path / "link"
    link.symlink_to(cache)
    _refused(link, tmp_path, "belongs to user id 65534")
