"""Peak memory and time of ``lockstep show`` and ``lockstep export`` (every format) at growing trace lengths.

For each length (100,000 and 1,000,000 events by default) the script writes a synthetic runtime
trace and a model trace (``trace_files.py``; ITF needs the model's full states), then runs each
command in its own child process (``python -m lockstep ...``, output to a file or /dev/null) and
reports its wall time and peak resident memory (the child's own ``ru_maxrss``, from ``os.wait4``).
A command that runs past ``--timeout`` seconds is killed and reported as such; each child's address
space is capped at ``--memory-limit`` GB (so a command that would take the machine's memory fails
instead: reported as failed, with its last words). Only the command line is used, so the same
script measures an older commit: ``python bench/trace_streaming.py [--events N ...] [--timeout S]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trace_files import write_model_trace, write_runtime_trace  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def commands(runtime: Path, model: Path, folder: Path) -> dict[str, list[str]]:
    return {
        "show": ["show", str(runtime)],
        "export perfetto": ["export", str(runtime), "--format", "perfetto", "-o", str(folder / "trace.json")],
        "export dot": ["export", str(runtime), "--format", "dot", "-o", str(folder / "trace.dot")],
        "export graphml": ["export", str(runtime), "--format", "graphml", "-o", str(folder / "trace.graphml")],
        "export itf": ["export", str(model), "--format", "itf", "-o", str(folder / "trace.itf.json")],
    }


def measure(arguments: list[str], timeout: float, memory_limit: int) -> tuple[str, float, float]:
    """(outcome, seconds, peak MB) of one ``lockstep`` command in a child process."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))

    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "lockstep", *arguments],
            stdout=subprocess.DEVNULL,
            stderr=errors,
            env=environment,
            preexec_fn=limit,
            start_new_session=True,
        )
        outcome = "ok"
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - started > timeout:
                os.killpg(process.pid, signal.SIGKILL)
                _, status, usage = os.wait4(process.pid, 0)
                outcome = f"killed after {timeout:.0f} s"
                break
            time.sleep(0.05)
        seconds = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        if outcome == "ok" and process.returncode != 0:
            errors.seek(0)
            last = errors.read().decode(errors="replace").strip().splitlines()[-1:] or [""]
            outcome = f"exit {process.returncode}: {last[0][:60]}"
    return outcome, seconds, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per command (default 600)")
    parser.add_argument("--memory-limit", type=float, default=8.0, help="GB of address space per command (default 8)")
    parser.add_argument("--only", nargs="*", help="command names to run (default: all)")
    arguments = parser.parse_args()
    print(f"{'events':>10}  {'command':<16} {'seconds':>8} {'peak MB':>8}  outcome")
    for count in arguments.events:
        with tempfile.TemporaryDirectory() as name:
            folder = Path(name)
            runtime = write_runtime_trace(folder / "runtime.jsonl", count)
            model = write_model_trace(folder / "model.jsonl", count)
            for command, words in commands(runtime, model, folder).items():
                if arguments.only and command not in arguments.only:
                    continue
                outcome, seconds, peak = measure(words, arguments.timeout, int(arguments.memory_limit * 2**30))
                print(f"{count:>10,}  {command:<16} {seconds:>8.1f} {peak:>8.0f}  {outcome}", flush=True)


if __name__ == "__main__":
    main()
