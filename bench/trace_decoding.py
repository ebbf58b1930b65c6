"""Trace decoding speed: lines per second of the streaming reader, and of a whole single-file input.

Writes a synthetic runtime trace (``trace_files.write_runtime_trace``, 1,000,000 events by default)
to a temporary folder, then times two loops over it, each the best of ``--repeats`` runs (the
machine may be shared, and the best run is the least disturbed one):

- ``reader``: ``TraceReader(path).events()``: decoding and every check of the format (field
  types, index order, nesting, surrogates);
- ``input``: ``open_traces([path]).records()``: the same plus the causal-order check, which is
  what ``replay``, ``show`` and ``export`` consume.

Only APIs that have not changed since the reader was written are used, so the same script measures
an older commit: ``python bench/trace_decoding.py --events N [--repeats R]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trace_files import write_runtime_trace  # noqa: E402

from lockstep.traces.merge import open_traces  # noqa: E402
from lockstep.traces.reader import TraceReader  # noqa: E402


def reader_pass(path: Path) -> int:
    with TraceReader(path) as reader:
        return sum(1 for _ in reader.events())


def input_pass(path: Path) -> int:
    return sum(1 for _ in open_traces([path]).records())


def best_rate(name: str, loop: object, path: Path, events: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        count = loop(path)  # type: ignore[operator]
        best = min(best, time.perf_counter() - started)
        assert count == events, (name, count, events)
    rate = events / best
    print(f"{name:>6}: {rate:12,.0f} lines/s  ({best:.2f} s for {events:,} events, best of {repeats})")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = write_runtime_trace(Path(folder) / "trace.jsonl", arguments.events)
        print(f"{arguments.events:,} events, {path.stat().st_size / 1e6:.0f} MB")
        best_rate("reader", reader_pass, path, arguments.events, arguments.repeats)
        best_rate("input", input_pass, path, arguments.events, arguments.repeats)


if __name__ == "__main__":
    main()
