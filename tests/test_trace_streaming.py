"""`show` and `export` stream: no writer holds more than a few events at once, and memory stays flat in length.

The records fed to the writers are objects that count themselves while alive (weak references), so a
writer that kept every event, or every event's arguments, would be caught at any length, without
timing anything. A child process exporting and drawing traces of two lengths shows the same at the
command line: peak memory does not grow with the number of events.
"""

from __future__ import annotations

import json
import os
import sys
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lockstep.checkers.export import write_itf
from lockstep.models import get_protocol
from lockstep.traces.export import write_dot, write_graphml, write_perfetto
from lockstep.traces.reader import Record
from lockstep.traces.swimlanes import survey, write_swimlanes
from tests.peak_memory import measured

ROOT = Path(__file__).resolve().parent.parent
COUNTEREXAMPLE = ROOT / "tests" / "fixtures" / "traces" / "dp-pause-pre-fix-seed.jsonl"
HEADER: dict[str, Any] = {
    "format": "lockstep-trace",
    "version": 1,
    "protocol": "dp-pause",
    "variant": "post-fix",
    "instance": "seed",
    "parameters": {"ranks": 2},
    "source": {"kind": "runtime"},
}


class Tracked(dict):  # type: ignore[type-arg]
    """A dict that can be weakly referenced, so the test can count those alive."""

    __slots__ = ("__weakref__",)


class Census:
    """How many tracked objects are alive now, and at most."""

    def __init__(self) -> None:
        self.alive = 0
        self.peak = 0
        self.made = 0

    def track(self, value: dict[str, Any]) -> Tracked:
        tracked = Tracked(value)
        self.alive += 1
        self.made += 1
        self.peak = max(self.peak, self.alive)
        weakref.finalize(tracked, self._gone)
        return tracked

    def _gone(self) -> None:
        self.alive -= 1


def runtime_events(count: int) -> Iterator[dict[str, Any]]:
    """Two ranks stepping, a collective per four events, a message: the causal order holds."""
    for index in range(count):
        cycle, phase = divmod(index, 6)
        rank = phase % 2
        if phase < 2:
            yield {
                "index": index,
                "actor": f"rank:{rank}",
                "action": "step",
                "args": {"rank": rank},
                "observed": {f"step_counter[{rank}]": cycle},
            }
        elif phase < 6:
            action = "enter" if phase < 4 else "complete"
            yield {
                "index": index,
                "actor": f"rank:{rank}",
                "action": action,
                "args": {"communicator": "worker_dp", "op": "forward"},
                "clock": {"worker_dp": cycle + 1},
            }


def model_events(count: int) -> Iterator[dict[str, Any]]:
    """The dp-pause counterexample's events over and over, re-indexed (full states: ITF can export it)."""
    events = [json.loads(line) for line in COUNTEREXAMPLE.read_text().splitlines()[1:]]
    for index in range(count):
        yield {**events[index % len(events)], "index": index}


def tracked_records(census: Census, events: Iterator[dict[str, Any]]) -> Iterator[Record]:
    for event in events:
        event["args"] = census.track(event["args"])
        yield Record("trace.jsonl", event["index"] + 2, census.track(event))


class Sink:
    """A text file that keeps nothing: it only counts what is written."""

    def __init__(self) -> None:
        self.characters = 0

    def write(self, text: str) -> int:
        self.characters += len(text)
        return len(text)


Writer = Callable[[Iterator[Record], Any], None]
MACHINE = get_protocol("dp-pause").instance("pre-fix").machine()
MODEL_HEADER = {**HEADER, "variant": "pre-fix", "source": {"kind": "model"}}
WRITERS: dict[str, tuple[Writer, Callable[[int], Iterator[dict[str, Any]]]]] = {
    "perfetto": (lambda records, file: write_perfetto(HEADER, records, file), runtime_events),
    "dot": (lambda records, file: write_dot(HEADER, records, file), runtime_events),
    "graphml": (lambda records, file: write_graphml(HEADER, records, file), runtime_events),
    "itf": (lambda records, file: write_itf(MACHINE, MODEL_HEADER, records, file), model_events),
    "show": (lambda records, file: write_swimlanes(LAYOUT, records, file), runtime_events),
}
LAYOUT = survey(HEADER, (Record("trace.jsonl", event["index"] + 2, event) for event in runtime_events(3000)), {}, 160)


@pytest.mark.parametrize("name", list(WRITERS))
def test_writers_hold_a_few_events_at_a_time(name: str) -> None:
    write, events = WRITERS[name]
    census = Census()
    sink = Sink()
    write(tracked_records(census, events(3000)), sink)
    assert census.made == 6000 and sink.characters > 3000
    assert census.peak <= 4, f"{name} held {census.peak} events or arguments at once"
    assert census.alive == 0


def test_the_survey_of_the_picture_holds_a_few_events_at_a_time() -> None:
    census = Census()
    layout = survey(HEADER, tracked_records(census, runtime_events(3000)), {"step": "EngineCore.step"}, 160)
    assert census.peak <= 4 and layout.events == 3000 and layout.last_index == 2999
    assert layout.actors == ["rank:0", "rank:1"] and layout.mirrored


def _write_trace(path: Path, events: Iterator[dict[str, Any]], header: dict[str, Any]) -> Path:
    with open(path, "w") as out:
        out.write(json.dumps(header) + "\n")
        for event in events:
            out.write(json.dumps(event, separators=(",", ":")) + "\n")
    return path


def _peak_kilobytes(*arguments: str) -> int:
    """The peak resident memory of ``lockstep ARGUMENTS`` in a child process (``tests.peak_memory``)."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    code, peak, _, error = measured([sys.executable, "-m", "lockstep", *arguments], environment=environment)
    assert code == 0, error
    return peak // 1024


def test_show_and_export_memory_is_flat_in_the_trace_length(tmp_path: Path) -> None:
    """20x the events, about the same peak memory (within 30 MB; the old GraphML export took 5 kB per event)."""
    peaks: dict[str, list[int]] = {}
    for count in (5_000, 100_000):
        trace = _write_trace(tmp_path / f"trace-{count}.jsonl", runtime_events(count), HEADER)
        model = _write_trace(tmp_path / f"model-{count}.jsonl", model_events(count), MODEL_HEADER)
        runs = {
            "graphml": ("export", str(trace), "--format", "graphml", "-o", str(tmp_path / "out.graphml")),
            "perfetto": ("export", str(trace), "--format", "perfetto"),
            "itf": ("export", str(model), "--format", "itf", "-o", str(tmp_path / "out.itf.json")),
            "show": ("show", str(trace)),
        }
        for name, arguments in runs.items():
            peaks.setdefault(name, []).append(_peak_kilobytes(*arguments))
    for name, (short, long) in peaks.items():
        assert long < short + 30 * 1024, f"{name}: {short} kB at 5,000 events, {long} kB at 100,000"


def test_the_census_catches_a_writer_that_keeps_the_events() -> None:
    census = Census()
    kept = list(tracked_records(census, runtime_events(100)))
    write_dot(HEADER, kept, Sink())
    assert census.peak == 200
