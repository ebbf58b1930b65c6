"""Launching the fused Triton kernels of ``fused`` over a search's chunks, and when to use them.

``FusedKernels`` imports the generated source (Triton reads a kernel's source from its file, so it
is kept as a signed entry of ``lockstep.cache``, kind ``fused``, named by its hash, and verified
before it is imported; the generation's result is kept beside it, named by a hash of its inputs), launches
the successor kernels over a chunk (one read-back per chunk: the successor count, the flag, the
count per tuple) and the predicates kernel over new states. A chunk or a batch of states that a
kernel flags goes back to the array kernels, which report it exactly. ``fused_kernels`` decides
whether they apply: CUDA (unless the search's ``kernels`` option says ``arrays``), or Triton's
interpreter on the CPU when asked for (``kernels`` ``triton`` and ``TRITON_INTERPRET=1``, set before
Triton is imported). Each kernel's
Triton source key is kept beside the module too (``source_keys``), so a later process does not parse
every kernel's source again to find its compiled binary.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import importlib.util
import json
import multiprocessing
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockstep.cache import Store
from lockstep.checkers.vector import fused as fused_module
from lockstep.checkers.vector import fused_symmetry
from lockstep.checkers.vector.fused import FusedSource, fused_source
from lockstep.checkers.vector.kernels import Kernels
from lockstep.checkers.vector.values import Unsupported

_STORE = Store("fused")


def written(arrays_source: str, words: int, groups: list[list[int]]) -> FusedSource:
    """``fused_source`` for these array kernels, kept in the cache beside the kernels (named by a hash of
    its inputs and of ``fused.py`` and ``fused_symmetry.py`` themselves, so that a change to any of
    them writes it again): reading back the generated code takes ~0.5-0.9 s on a large model."""
    generator = b"".join(Path(str(module.__file__)).read_bytes() for module in (fused_module, fused_symmetry))
    digest = hashlib.sha256(
        generator + repr((arrays_source, words, groups, fused_module.SKIP_IDLE_TUPLES)).encode()
    ).hexdigest()
    stem = f"source_{digest[:20]}"
    entry = _STORE.read(stem, ".json")
    if entry is not None:
        try:
            return FusedSource(**json.loads(entry.data))
        except (ValueError, TypeError) as error:
            _STORE.reject(entry.path, f"it does not parse ({type(error).__name__})")
    fused = fused_source(arrays_source, words, groups, arrays_source)
    _STORE.write(stem, ".json", json.dumps(dataclasses.asdict(fused)).encode())
    return fused


_LOADED: dict[str, Any] = {}  # this process's imported kernels, by their source's hash


def load(fused: FusedSource) -> Any:
    """Import the generated kernels (Triton reads a kernel's source from its file), once per
    process: Triton's kernel objects then keep their compiled kernels, so a later check of the same
    model (``check --all``, a benchmark's repeats) neither parses nor hashes their source again. The
    module's file is a signed cache entry whose bytes must be ``fused.source`` itself; the verified
    bytes are what is executed."""
    digest = hashlib.sha256(fused.source.encode()).hexdigest()[:20]
    if digest in _LOADED:
        return _LOADED[digest]
    stem, wanted = f"fused_{digest}", fused.source.encode()
    entry = _STORE.read(stem, ".py")
    if entry is not None and entry.data != wanted:
        _STORE.reject(entry.path, "it is not the generated source it is named after")
        entry = None
    path = entry.path if entry is not None else _STORE.write(stem, ".py", wanted)
    if path is None:
        raise Unsupported(f"fused kernels: the cache folder {_STORE.folder()} cannot be written")
    module = _LOADED[digest] = _import(path, wanted)
    return module


def _import(path: Path, source: bytes) -> Any:
    """The module at ``path`` (whose file Triton reads), executed from ``source``, its verified bytes."""
    name = f"lockstep_fused_{path.stem.partition('.')[0].removeprefix('fused_')}"
    specification = importlib.util.spec_from_file_location(name, path)
    if specification is None:
        raise Unsupported(f"fused kernels: cannot import {path}")
    module = importlib.util.module_from_spec(specification)
    sys.modules[name] = module  # Triton's source inspection finds the module by name
    exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 - our own signed entry
    return module


def _arguments(torch: Any, words: int, tuples: int, device: str, name: str) -> tuple[Any, ...]:
    """Arguments of the kernel's signature (``predicates`` writes bytes), for compiling it ahead."""
    words_array = torch.zeros((words, 1), dtype=torch.int64, device=device)
    pointer = torch.zeros(1, dtype=torch.int64, device=device)
    control = torch.zeros(2 + tuples, dtype=torch.int64, device=device)
    byte = torch.zeros(1, dtype=torch.int8, device=device)
    out = byte if name == "predicates" else pointer
    return (words_array, 1, 1, out, pointer, pointer, control, byte, pointer, 1, 256)


def _compile_one(path: str, source: bytes, name: str, words: int, tuples: int) -> str:
    """Compile one kernel in a worker process; Triton's disk cache keeps it for the search."""
    import torch

    kernel = getattr(_import(Path(path), source), name)
    kernel.warmup(*_arguments(torch, words, tuples, "cuda", name), grid=(1,))
    return name


def compile_ahead(path: Path, source: bytes, names: list[str], words: int, tuples: int) -> None:
    """Compile the kernels in parallel processes (Triton compiles one kernel at a time per process,
    holding the interpreter lock); a kernel a worker fails on is compiled again at its first launch."""
    workers = min(len(names), os.cpu_count() or 1)
    if workers < 2:
        return
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        futures = [pool.submit(_compile_one, str(path), source, name, words, tuples) for name in names]
        concurrent.futures.wait(futures)


def _keys_name(path: Path) -> tuple[str, str]:
    """The cache name (stem, suffix) of the source keys of the kernels in ``path``: they depend on
    Triton's version and Python's (the parse that makes them), so both name the entry."""
    import triton

    python = "".join(str(part) for part in sys.version_info[:2])
    return path.name.partition(".")[0], f".keys-triton{triton.__version__}-py{python}.json"


def source_keys(path: Path, kernels: dict[str, Any]) -> bool:
    """Give each Triton kernel of the module at ``path`` the source key Triton computed for it in an
    earlier process (``save_source_keys``); True if every kernel has one.

    A Triton kernel's source key (``JITFunction.cache_key``, part of the key of its compiled binary in
    Triton's cache) is a hash of its source and of what it calls, made by parsing and walking that
    source again in every process (docs/performance.md measures it).
    The generated module's file is named by a hash of its whole source, so the keys saved beside it
    are the keys of that very source; a key Triton has already computed is left as it is."""
    entry = _STORE.read(*_keys_name(path))
    try:
        saved = json.loads(entry.data) if entry is not None else None
    except ValueError:
        saved = None
    if not isinstance(saved, dict) or set(saved) != set(kernels) or not all(isinstance(v, str) for v in saved.values()):
        return False
    for name, kernel in kernels.items():
        if getattr(kernel, "hash", "") is None:  # not computed yet in this process
            kernel.hash = saved[name]
    return True


def save_source_keys(path: Path, kernels: dict[str, Any]) -> None:
    """Keep the kernels' source keys beside their module, for ``source_keys`` in later processes."""
    _STORE.write(*_keys_name(path), json.dumps({name: kernel.cache_key for name, kernel in kernels.items()}).encode())


@dataclass
class Expansion:
    """A chunk's successors from the fused kernels (device tensors), or from the native ones (numpy
    arrays, in discovery order, with their fingerprints)."""

    states: Any  # words x successors
    rows: Any  # each successor's parent row in the chunk
    via: Any  # each successor's tuple id
    counts: list[int]  # successors per tuple id
    enabled: Any  # per chunk row: some tuple is enabled
    fingerprints: Any = None  # the successors' fingerprints, where the kernel computed them


class FusedKernels:
    """The fused kernels of one machine, launched on ``device``; ``arrays`` redo what they flag."""

    def __init__(self, arrays: Kernels, torch: Any, device: str) -> None:
        groups: dict[int, list[int]] = {}
        for tuple_id, (action, _) in enumerate(arrays.tuples):
            groups.setdefault(action, []).append(tuple_id)
        words = arrays.layout.words
        self.arrays = arrays
        self.fused = written(arrays.source, words, list(groups.values()))
        self.module = load(self.fused)
        self.kernels = [getattr(self.module, name) for name in self.fused.kernels]
        self.predicate_kernel = self.module.predicates
        self.torch = torch
        self.device = device
        self.tuples = len(arrays.tuples)
        self.words = words
        self.tables = torch.tensor(self.fused.tables or [0], dtype=torch.int64, device=device)
        interpreted = os.environ.get("TRITON_INTERPRET") == "1"
        self.block = 1 << 14 if interpreted else 256  # the interpreter runs a program at a time
        if not interpreted:
            names = [*self.fused.kernels, "predicates", *(["canonical"] if self.fused.canonical else [])]
            compiled = Path(self.module.__file__).with_suffix(".compiled")  # Triton's cache has them
            if not compiled.exists():
                compile_ahead(Path(self.module.__file__), self.fused.source.encode(), names, words, self.tuples)
                compiled.touch()
            kernels = {name: getattr(self.module, name) for name in names}
            known = source_keys(Path(self.module.__file__), kernels)
            for name, kernel in kernels.items():  # from the disk cache the workers filled
                kernel.warmup(*_arguments(torch, words, self.tuples, device, name), grid=(1,))
            if not known:
                save_source_keys(Path(self.module.__file__), kernels)
        self.unused = torch.zeros(1, dtype=torch.int64, device=device)
        self.unused_byte = torch.zeros(1, dtype=torch.int8, device=device)
        self.capacity = 0

    def expand(self, chunk: Any, stored: int = 0) -> Expansion | None:
        """The successors of ``chunk`` (words x rows), or None when a row fails or leaves a sort
        (the array kernels then redo the chunk and report it); ``stored`` is not read (the native
        kernels' signature)."""
        torch = self.torch
        rows = int(chunk.shape[1])
        capacity = max(self.capacity, 4 * rows, 1024)
        while True:
            control = torch.zeros(2 + self.tuples, dtype=torch.int64, device=self.device)
            enabled = torch.empty(rows, dtype=torch.int8, device=self.device)
            out = torch.empty((self.words, capacity), dtype=torch.int64, device=self.device)
            parent = torch.empty(capacity, dtype=torch.int64, device=self.device)
            via = torch.empty(capacity, dtype=torch.int64, device=self.device)
            grid = ((rows + self.block - 1) // self.block,)
            stride = int(chunk.stride(0))
            for kernel in self.kernels:
                kernel[grid](chunk, rows, stride, out, parent, via, control, enabled, self.tables, capacity, self.block)
            values = control.tolist()
            if values[1]:
                return None
            total = int(values[0])
            if total <= capacity:
                break
            capacity = self.capacity = total + total // 4  # too small: grow, remember, redo
        return Expansion(out[:, :total], parent[:total], via[:total], values[2:], enabled.bool())

    def canonical(self, states: Any) -> Any:
        """Each state's representative under the declared symmetry (``Kernels.canonical``'s values), in one launch."""
        return self.canonical_keys(states)[0]

    def canonical_keys(self, states: Any) -> tuple[Any, Any]:
        """Each state's representative and the representative's fingerprint (``fingerprint``'s value),
        both from one launch."""
        torch = self.torch
        rows = int(states.shape[1])
        if states.stride(1) != 1:
            states = states.contiguous()
        out = torch.empty((self.words, rows), dtype=torch.int64, device=self.device)
        keys = torch.empty(rows, dtype=torch.int64, device=self.device)
        if rows:
            grid = ((rows + self.block - 1) // self.block,)
            unused = self.unused
            self.module.canonical[grid](
                states,
                rows,
                int(states.stride(0)),
                out,
                keys,
                unused,
                unused,
                self.unused_byte,
                self.tables,
                rows,
                self.block,
            )
        return out, keys

    def fingerprint(self, words: Any) -> Any:
        """The fingerprints of a (words, rows) tensor, in one kernel (``hashed.fingerprint``)."""
        from lockstep.checkers.vector.hashed import fingerprint

        return fingerprint(self.torch, words)

    def visited_set(self, backend: Any, words: int) -> Any:
        """The ``--compact`` visited set as a hash table on the device (``hashed.HashedFingerprints``)."""
        from lockstep.checkers.vector.hashed import HashedFingerprints

        return HashedFingerprints(backend, words, self.torch)

    def _arrays_predicates(self, states: Any) -> tuple[tuple[Any, ...], Any]:
        values, error = self.arrays.predicates(states)
        return tuple(values), error

    def predicates(self, states: Any) -> tuple[tuple[Any, ...], Any]:
        """Each property's value over ``states`` (as ``Kernels.predicates`` gives it)."""
        torch = self.torch
        rows = int(states.shape[1])
        if not rows:
            return self._arrays_predicates(states)
        control = torch.zeros(2, dtype=torch.int64, device=self.device)
        out = torch.empty((len(self.fused.values), rows), dtype=torch.int8, device=self.device)
        grid = ((rows + self.block - 1) // self.block,)
        unused, byte = self.unused, self.unused_byte
        self.predicate_kernel[grid](
            states, rows, int(states.stride(0)), out, unused, unused, control, byte, self.tables, rows, self.block
        )
        if int(control[1].item()):
            return self._arrays_predicates(states)
        values = tuple(
            out[position].bool() if value == "row" else value for position, value in enumerate(self.fused.values)
        )
        return values, False


def fused_kernels(arrays: Kernels, device: str, choice: str = "auto") -> FusedKernels | None:
    """The fused kernels for ``bfs-gpu`` on ``device``, or None where they do not apply: no Triton,
    or ``choice`` ``arrays``. On a CPU device they run only when asked for (``choice`` ``triton``), in
    Triton's interpreter (``TRITON_INTERPRET=1``, set before Triton is imported)."""
    if choice == "arrays":
        return None
    if not device.startswith("cuda") and (choice != "triton" or os.environ.get("TRITON_INTERPRET") != "1"):
        return None
    try:
        import torch
        import triton  # noqa: F401
    except ImportError:
        return None
    return FusedKernels(arrays, torch, device)


__all__ = ["Expansion", "FusedKernels", "fused_kernels", "load"]
