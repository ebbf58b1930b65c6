"""The peak resident memory of a command, measured from outside it.

A child's ``ru_maxrss`` starts from its parent's peak: when the child execs, the kernel records
the high-water mark of the address space it leaves, and a forked child's copy (or a vforked
child's shared one) is the parent's. A pytest worker late in the suite holds several hundred MiB,
which a child it starts reads as its own peak (426-429 MiB for a 316-338 MiB search, in CI). So the
command runs as the grandchild of a small launcher, which ``wait4``s it and reports its peak.
"""

from __future__ import annotations

import json
import subprocess
import sys

LAUNCHER = """
import json, os, subprocess, sys, threading
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
streams = {}
readers = [threading.Thread(target=lambda name=name, stream=stream: streams.__setitem__(name, stream.read()))
           for name, stream in (("output", child.stdout), ("error", child.stderr))]
for reader in readers:
    reader.start()
_, status, usage = os.wait4(child.pid, 0)  # reaped here, not by Popen: its rusage is ours to read
child.returncode = os.waitstatus_to_exitcode(status)
for reader in readers:
    reader.join()
print(json.dumps({"exit": child.returncode, "peak_kib": usage.ru_maxrss, **streams}))
"""


def measured(
    command: list[str], timeout: float = 300.0, environment: dict[str, str] | None = None
) -> tuple[int, int, str, str]:
    """Run ``command`` under the launcher: its exit code, its peak resident bytes (its own and
    its children's), its standard output and its standard error."""
    launcher = subprocess.run(
        [sys.executable, "-c", LAUNCHER, *command],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
        env=environment,
    )
    report = json.loads(launcher.stdout)
    return report["exit"], report["peak_kib"] * 1024, report["output"], report["error"]
