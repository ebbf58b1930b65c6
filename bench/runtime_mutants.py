"""Print the kill rate of ``lockstep test-runtime`` over the runtime mutants, per protocol.

``python bench/runtime_mutants.py [--protocol P]... [--max-paths N]`` applies each mutant of
``tests/runtime_mutants.py`` to a temporary copy of the package, runs ``lockstep test-runtime``
on the protocol's post-fix ``seed`` (``--fail-fast``) with that copy first on PYTHONPATH, and
prints one line per mutant (killed or survived, the first failing path, the seconds it took)
and then the kill rate per protocol (equivalent mutants left out of the rate). A mutant whose
original line is gone fails loudly. Slow: a mutant that survives costs every goal path's run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from runtime_mutants import MUTANTS, run_test_runtime  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", action="append", help="only this protocol's mutants (repeatable)")
    parser.add_argument("--mutant", action="append", help="only the mutant of this name (repeatable)")
    parser.add_argument("--max-paths", type=int, help="run at most N goal paths per mutant")
    arguments = parser.parse_args()
    rates: dict[str, list[int]] = {}
    for mutant in MUTANTS:
        if arguments.protocol and mutant.protocol not in arguments.protocol:
            continue
        if arguments.mutant and mutant.name not in arguments.mutant:
            continue
        options = [] if arguments.max_paths is None else ["--max-paths", str(arguments.max_paths)]
        started = time.monotonic()
        with tempfile.TemporaryDirectory() as folder:
            code, result, stderr = run_test_runtime(mutant, Path(folder), *options)
        seconds = time.monotonic() - started
        failing = [run for run in result.get("runs", []) if run.get("verdict") in ("divergence", "violation")]
        where = f"path {failing[0]['index']} ({failing[0]['goal']}): {failing[0]['verdict']}" if failing else ""
        state = "killed" if code == 1 else ("equivalent" if mutant.equivalent else "SURVIVED")
        if code not in (0, 1):
            where = f"exit {code}: " + (stderr.strip().splitlines() or [""])[-1]
        print(f"{mutant.protocol:16} {mutant.name:28} {state:10} {seconds:6.1f} s  {where}", flush=True)
        counts = rates.setdefault(mutant.protocol, [0, 0])
        if not mutant.equivalent:
            counts[0] += code == 1
            counts[1] += 1
    for protocol, (killed, total) in rates.items():
        print(f"{protocol}: {killed}/{total} non-equivalent mutants killed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
