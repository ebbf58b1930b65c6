"""Large synthetic traces for the trace benchmarks (``trace_decoding.py``, ``trace_streaming.py``).

``write_runtime_trace`` writes a dp-pause-shaped runtime recording: two ranks stepping with an
observed projection, a worker_dp collective (an ``enter`` and a ``complete`` per rank) and a
client message to rank 0, in an order the causal rule allows. ``write_model_trace`` repeats the
events of the dp-pause pre-fix counterexample in ``tests/fixtures`` (re-indexed), so its states are
the model's and ITF export works. Only the standard library is used, so the scripts also run at
older commits of lockstep.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COUNTEREXAMPLE = ROOT / "tests" / "fixtures" / "traces" / "dp-pause-pre-fix-seed.jsonl"
HEADER = {
    "format": "lockstep-trace",
    "version": 1,
    "protocol": "dp-pause",
    "variant": "post-fix",
    "instance": "seed",
    "parameters": {"ranks": 2, "requests": 1, "sync_interval": 1, "max_wave": 4},
    "source": {"kind": "runtime", "backend": "gloo", "device": "cpu", "torch": None, "cuda": None, "host": None},
}


def _line(value: object) -> str:
    return json.dumps(value, separators=(",", ":")) + "\n"


def _runtime_events(cycle: int) -> list[dict[str, object]]:
    """One cycle of eight events (cycle counts from 0)."""
    events: list[dict[str, object]] = []
    for rank in (0, 1):
        observed = {
            f"mode[{rank}]": "FORWARD_DUMMY",
            f"engines_running[{rank}]": True,
            f"current_wave[{rank}]": cycle % 4,
            f"step_counter[{rank}]": cycle,
            f"pause_state[{rank}]": "UNPAUSED",
            f"requests[{rank}]": 1,
            f"finished_pending[{rank}]": False,
            f"pending_pause[{rank}]": False,
        }
        events.append({"actor": f"rank:{rank}", "action": "step", "args": {"rank": rank}, "observed": observed})
    for action in ("enter", "complete"):
        for rank in (0, 1):
            events.append(
                {
                    "actor": f"rank:{rank}",
                    "action": action,
                    "args": {"communicator": "worker_dp", "op": "forward"},
                    "clock": {"worker_dp": cycle + 1},
                }
            )
    events.append(
        {
            "actor": "client",
            "action": "client_pause",
            "args": {"rank": 0},
            "observed": {"client.phase": "PAUSE", "client.engines_running": True, "client.requests_sent": 1},
            "clock": {"send:client>rank:0": cycle + 1},
        }
    )
    events.append(
        {
            "actor": "rank:0",
            "action": "arrive_from_client",
            "args": {"rank": 0},
            "clock": {"recv:client>rank:0": cycle + 1},
        }
    )
    return events


def write_runtime_trace(path: Path, count: int) -> Path:
    """A runtime trace of ``count`` events at ``path``."""
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        out.write(_line(HEADER))
        index, cycle = 0, 0
        while index < count:
            for event in _runtime_events(cycle):
                if index == count:
                    break
                out.write(_line({"index": index, **event}))
                index += 1
            cycle += 1
    return path


def write_model_trace(path: Path, count: int) -> Path:
    """A model trace of ``count`` events at ``path``: the counterexample's events over and over."""
    header, *lines = COUNTEREXAMPLE.read_text(encoding="utf-8").splitlines()
    parsed = json.loads(header)
    parsed["parameters"].pop("property", None)  # not a counterexample any more: no property to show
    events = [json.loads(line) for line in lines if line]
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        out.write(_line(parsed))
        for index in range(count):
            out.write(_line({**events[index % len(events)], "index": index}))
    return path
