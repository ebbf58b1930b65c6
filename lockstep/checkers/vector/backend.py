"""Array backends of the vectorised engines: numpy on one CPU core, torch on a GPU (or the CPU).

A backend supplies the helpers the generated kernels call (``_where``, ``_int``, ``_rows``,
``_columns``, ``_stack``, ``_less``, ``_lookup``, ``_minimum``, ``_maximum``) and the few array
operations the search loop needs (sorting, searching, concatenating, gathering, fingerprints).
Packed states are int64 arrays of shape (words, rows); every word is non-negative (63 bits), so
both libraries order them alike. Fingerprints are the same 64-bit mix (a multiply and xor-shift per
word, splitmix64's finaliser at the end) in both, so a state has one fingerprint on every device
and in every process. torch is imported only here, and only when a torch backend is made.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_MULTIPLY_1 = 0xBF58476D1CE4E5B9
_MULTIPLY_2 = 0x94D049BB133111EB
_SEED = 0x9E3779B97F4A7C15


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


class NumpyBackend:
    """numpy arrays on the CPU (one core)."""

    name = "numpy"
    device = "cpu"
    chunk = 1 << 17  # frontier states per kernel call: large enough to amortise the calls, cache-friendly
    merges = True  # the visited set merges sorted arrays (one stable sort) rather than searching them

    def namespace(self) -> dict[str, Any]:
        def counts(masks: tuple[Any, ...], total: int) -> list[int]:
            return [total if mask is True else 0 if mask is False else int(np.count_nonzero(mask)) for mask in masks]

        def rows(mask: Any, total: int, count: int) -> Any:
            if mask is True:
                return np.arange(total, dtype=np.int64)
            return np.flatnonzero(mask)

        def as_int(value: Any) -> Any:
            return value.astype(np.int64) if isinstance(value, np.ndarray) else int(value)

        def stack(words: list[Any], count: int) -> Any:
            return np.stack([np.broadcast_to(np.asarray(word, dtype=np.int64), (count,)) for word in words])

        tables: dict[tuple[int, ...], Any] = {}

        def lookup(table: tuple[int, ...], values: Any) -> Any:
            array = tables.get(table)
            if array is None:
                array = tables[table] = np.asarray(table, dtype=np.int64)
            return array[values]

        return {
            "_lookup": lookup,
            "_where": np.where,
            "_minimum": np.minimum,
            "_maximum": np.maximum,
            "_int": as_int,
            "_counts": counts,
            "_rows": rows,
            "_stack": stack,
            "_less": self.less,
            "_columns": self.columns,
        }

    # ------------------------------------------------------------------------------ array operations
    def array(self, values: Any) -> Any:
        return np.asarray(values, dtype=np.int64)

    def to_numpy(self, values: Any) -> np.ndarray:
        return np.asarray(values)

    def empty_words(self, words: int) -> Any:
        return np.empty((words, 0), dtype=np.int64)

    def empty(self) -> Any:
        return np.empty(0, dtype=np.int64)

    def empty_like(self, values: Any) -> Any:
        return np.empty_like(values)

    def empty_table(self, rows: int, columns: int) -> Any:
        """An uninitialised (rows, columns) array."""
        return np.empty((rows, columns), dtype=np.int64)

    def concatenate(self, arrays: list[Any], axis: int = 0) -> Any:
        return np.concatenate(arrays, axis=axis)

    def full(self, count: int, value: int) -> Any:
        return np.full(count, value, dtype=np.int64)

    def arange(self, start: int, stop: int) -> Any:
        return np.arange(start, stop, dtype=np.int64)

    def argsort(self, values: Any) -> Any:
        return np.argsort(values)

    def columns(self, array: Any, indices: Any) -> Any:
        """``array[:, indices]`` laid out row by row (indexing would give a column-major array, whose
        rows the kernels then read with a stride). Row by row where ``array`` is a slice of a wider
        one: ``np.take`` would first copy all of it."""
        if array.flags.c_contiguous:
            return np.take(array, indices, axis=1)
        gathered = np.empty((array.shape[0], len(indices)), dtype=array.dtype)
        for row, values in zip(array, gathered):
            np.take(row, indices, out=values)
        return gathered

    def rows_of(self, array: Any, indices: Any) -> Any:
        """``array[:, indices].T``: the chosen columns as rows, each one's values side by side."""
        return np.take(np.ascontiguousarray(array.T), indices, axis=0)

    def merge_order(self, values: Any) -> Any:
        """The stable sorting order of ``values``: a linear merge where they are sorted runs (timsort)."""
        return np.argsort(values, kind="stable")

    def searchsorted(self, sorted_values: Any, values: Any) -> Any:
        return np.searchsorted(sorted_values, values)

    def nonzero(self, mask: Any) -> Any:
        return np.flatnonzero(mask)

    def count(self, mask: Any) -> int:
        return int(np.count_nonzero(mask))

    def flags(self, masks: list[Any]) -> list[bool]:
        """Whether each mask (an array or a Python bool) has a true row."""
        return [bool(mask) if isinstance(mask, bool) else bool(mask.any()) for mask in masks]

    def first_rows(self, masks: list[Any]) -> list[int | None]:
        """The first true row of each mask (an array or a Python bool), None where there is none."""
        rows: list[int | None] = []
        for mask in masks:
            if isinstance(mask, bool):
                rows.append(0 if mask else None)
            else:
                hits = np.flatnonzero(mask)
                rows.append(int(hits[0]) if len(hits) else None)
        return rows

    def less(self, first: Any, second: Any) -> Any:
        """Row-wise lexicographic ``first < second`` over (words, rows) arrays."""
        less = np.zeros(first.shape[1], dtype=bool)
        equal = np.ones(first.shape[1], dtype=bool)
        for word in range(first.shape[0]):
            less |= equal & (first[word] < second[word])
            equal &= first[word] == second[word]
        return less

    def fingerprint(self, words: Any) -> Any:
        """A 64-bit fingerprint (as int64) of every column of a (words, rows) array."""
        hashed = np.full(words.shape[1], _SEED, dtype=np.uint64)
        shifted = np.empty_like(hashed)  # one scratch array: every step is in place
        first, second = np.uint64(_MULTIPLY_1), np.uint64(_MULTIPLY_2)
        for word in range(words.shape[0]):
            np.bitwise_xor(hashed, words[word].view(np.uint64), out=hashed)
            np.multiply(hashed, first, out=hashed)
            np.bitwise_xor(hashed, np.right_shift(hashed, np.uint64(32), out=shifted), out=hashed)
        np.bitwise_xor(hashed, np.right_shift(hashed, np.uint64(29), out=shifted), out=hashed)
        np.multiply(hashed, second, out=hashed)
        np.bitwise_xor(hashed, np.right_shift(hashed, np.uint64(32), out=shifted), out=hashed)
        return hashed.view(np.int64)

    def unique_rows(self, rows: Any) -> tuple[Any, Any]:
        """(index of each distinct column's first occurrence, each column's group: the position of
        its distinct column among those indices) of a (words, rows) array."""
        _, first, inverse = np.unique(np.ascontiguousarray(rows.T), axis=0, return_index=True, return_inverse=True)
        return first, inverse.reshape(-1)

    def run_minimum(self, values: Any, starts: Any) -> Any:
        """The least of ``values`` over each run that begins where ``starts`` is true."""
        return np.minimum.reduceat(values, np.flatnonzero(starts)) if len(values) else values

    def group_minimum(self, values: Any, groups: Any, count: int) -> Any:
        """The least of ``values`` in each of ``count`` groups (``groups``: each value's group)."""
        least = np.full(count, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(least, groups, values)
        return least


class TorchBackend:
    """torch tensors on ``device`` ("cuda" or "cpu"); the same kernels as numpy."""

    name = "torch"

    def __init__(self, device: str = "cuda") -> None:
        import torch

        if device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError("no CUDA device is available to torch; use --device cpu or --engine bfs-vec")
        self.torch = torch
        self.device = device
        self.chunk = 1 << 21 if device.startswith("cuda") else 1 << 17  # a GPU needs big arrays to be busy
        self.merges = False  # the visited set searches its sorted runs (a GPU has no cheap merge)

    def namespace(self) -> dict[str, Any]:
        torch = self.torch
        device = self.device

        def where(condition: Any, then: Any, otherwise: Any) -> Any:
            return torch.where(condition, then, otherwise)

        def extreme(function: Any, bound: str) -> Any:
            def apply(first: Any, second: Any) -> Any:
                if not isinstance(first, torch.Tensor):
                    first, second = second, first
                if not isinstance(second, torch.Tensor):
                    return torch.clamp(first, **{bound: second})  # a tensor and a number: one operation
                return function(first, second)

            return apply

        def counts(masks: tuple[Any, ...], total: int) -> list[int]:
            """Every mask's number of rows, read back from the device at once."""
            tensors = [mask.sum() for mask in masks if isinstance(mask, torch.Tensor)]
            read = iter(torch.stack(tensors).tolist() if tensors else [])
            return [total if mask is True else 0 if mask is False else int(next(read)) for mask in masks]

        def rows(mask: Any, total: int, count: int) -> Any:
            if mask is True:
                return torch.arange(total, dtype=torch.int64, device=device)
            return torch.nonzero_static(mask, size=count).flatten()  # the count is known: no synchronisation

        def as_int(value: Any) -> Any:
            return value.to(torch.int64) if isinstance(value, torch.Tensor) else int(value)

        def stack(words: list[Any], count: int) -> Any:
            columns = [
                word.to(torch.int64)
                if isinstance(word, torch.Tensor)
                else torch.full((count,), int(word), dtype=torch.int64, device=device)
                for word in words
            ]
            return torch.stack(columns)

        tables: dict[tuple[int, ...], Any] = {}

        def lookup(table: tuple[int, ...], values: Any) -> Any:
            array = tables.get(table)
            if array is None:
                array = tables[table] = torch.as_tensor(table, dtype=torch.int64, device=device)
            return array[values]

        return {
            "_lookup": lookup,
            "_where": where,
            "_minimum": extreme(torch.minimum, "max"),
            "_maximum": extreme(torch.maximum, "min"),
            "_int": as_int,
            "_counts": counts,
            "_rows": rows,
            "_stack": stack,
            "_less": self.less,
            "_columns": self.columns,
        }

    def array(self, values: Any) -> Any:
        return self.torch.as_tensor(np.asarray(values, dtype=np.int64), device=self.device)

    def to_numpy(self, values: Any) -> np.ndarray:
        converted: np.ndarray = values.cpu().numpy()
        return converted

    def empty_words(self, words: int) -> Any:
        return self.torch.empty((words, 0), dtype=self.torch.int64, device=self.device)

    def empty(self) -> Any:
        return self.torch.empty(0, dtype=self.torch.int64, device=self.device)

    def empty_like(self, values: Any) -> Any:
        return self.torch.empty_like(values)

    def empty_table(self, rows: int, columns: int) -> Any:
        """An uninitialised (rows, columns) tensor."""
        return self.torch.empty((rows, columns), dtype=self.torch.int64, device=self.device)

    def concatenate(self, arrays: list[Any], axis: int = 0) -> Any:
        return self.torch.cat(arrays, dim=axis)

    def full(self, count: int, value: int) -> Any:
        return self.torch.full((count,), value, dtype=self.torch.int64, device=self.device)

    def arange(self, start: int, stop: int) -> Any:
        return self.torch.arange(start, stop, dtype=self.torch.int64, device=self.device)

    def argsort(self, values: Any) -> Any:
        return self.torch.argsort(values, stable=True)

    def columns(self, array: Any, indices: Any) -> Any:
        """``array[:, indices]``."""
        return array[:, indices]

    def rows_of(self, array: Any, indices: Any) -> Any:
        """``array[:, indices].T``."""
        return array[:, indices].T

    def merge_order(self, values: Any) -> Any:
        return self.torch.argsort(values, stable=True)

    def searchsorted(self, sorted_values: Any, values: Any) -> Any:
        return self.torch.searchsorted(sorted_values, values)

    def nonzero(self, mask: Any) -> Any:
        return self.torch.nonzero(mask).flatten()

    def count(self, mask: Any) -> int:
        return int(mask.sum().item())

    def flags(self, masks: list[Any]) -> list[bool]:
        """Whether each mask has a true row, read back from the device at once."""
        tensors = [mask.any() for mask in masks if not isinstance(mask, bool)]
        read = iter(self.torch.stack(tensors).tolist() if tensors else [])
        return [mask if isinstance(mask, bool) else bool(next(read)) for mask in masks]

    def first_rows(self, masks: list[Any]) -> list[int | None]:
        """The first true row of each mask (a tensor or a Python bool), read back from the device at once."""
        tensors = [mask for mask in masks if not isinstance(mask, bool)]
        found: list[int] = []
        if tensors:
            torch = self.torch
            count = int(tensors[0].shape[0])
            positions = torch.arange(count, dtype=torch.int64, device=tensors[0].device)
            least = torch.where(torch.stack(tensors), positions, count).min(dim=1).values
            found = [row if row < count else -1 for row in least.tolist()]
        read = iter(found)
        rows: list[int | None] = []
        for mask in masks:
            row = (0 if mask else -1) if isinstance(mask, bool) else next(read)
            rows.append(None if row < 0 else row)
        return rows

    def less(self, first: Any, second: Any) -> Any:
        torch = self.torch
        less = torch.zeros(first.shape[1], dtype=torch.bool, device=first.device)
        equal = torch.ones(first.shape[1], dtype=torch.bool, device=first.device)
        for word in range(first.shape[0]):
            less |= equal & (first[word] < second[word])
            equal &= first[word] == second[word]
        return less

    def fingerprint(self, words: Any) -> Any:
        torch = self.torch

        def shifted(value: Any, bits: int) -> Any:  # a logical right shift of int64
            return (value >> bits) & ((1 << (64 - bits)) - 1)

        hashed = torch.full((words.shape[1],), _signed(_SEED), dtype=torch.int64, device=words.device)
        for word in range(words.shape[0]):
            hashed = (hashed ^ words[word]) * _signed(_MULTIPLY_1)
            hashed = hashed ^ shifted(hashed, 32)
        hashed = hashed ^ shifted(hashed, 29)
        hashed = hashed * _signed(_MULTIPLY_2)
        return hashed ^ shifted(hashed, 32)

    def unique_rows(self, rows: Any) -> tuple[Any, Any]:
        torch = self.torch
        _, inverse = torch.unique(rows.T.contiguous(), dim=0, return_inverse=True)
        count = int(inverse.max().item()) + 1 if len(inverse) else 0
        positions = torch.arange(len(inverse), dtype=torch.int64, device=inverse.device)
        first = torch.full((count,), len(inverse), dtype=torch.int64, device=inverse.device)
        first.scatter_reduce_(0, inverse, positions, "amin")
        return first, inverse

    def run_minimum(self, values: Any, starts: Any) -> Any:
        groups = self.torch.cumsum(starts.to(self.torch.int64), 0) - 1
        return self.group_minimum(values, groups, int(groups[-1].item()) + 1 if len(groups) else 0)

    def group_minimum(self, values: Any, groups: Any, count: int) -> Any:
        least = self.torch.full(
            (count,), self.torch.iinfo(self.torch.int64).max, dtype=self.torch.int64, device=values.device
        )
        return least.scatter_reduce_(0, groups, values, "amin")


Backend = NumpyBackend | TorchBackend


def make_backend(engine: str, device: str | None) -> Backend:
    """The backend of ``bfs-vec`` (numpy) or ``bfs-gpu`` (torch on ``device``, default cuda)."""
    if engine == "bfs-vec":
        return NumpyBackend()
    return TorchBackend(device or "cuda")


__all__ = ["Backend", "NumpyBackend", "TorchBackend", "make_backend"]
