"""The entry point of a rank process: ``python -m lockstep.impl.rank``.

Spawned by ``lockstep run`` as ``python -m lockstep.impl.rank --config RUN_DIR/config.json``, by
a ``RankPool`` as ``python -m lockstep.impl.rank --pool DIR`` (one run after another), or
started by torchrun with the run's flags::

    torchrun --nproc-per-node 2 -m lockstep.impl.rank dp-pause --variant pre-fix --hang-timeout 5

The protocol's package (``lockstep.impl.protocols``) provides ``run_rank`` (and may provide ``join``).
Under torchrun only ranks join the group: rank 0 makes the run directory and the socket key,
shares them over the default group, and starts the protocol's helper processes (dp-pause: the
coordinator and client) itself, and a watchdog that diagnoses a hang; rank 0's guardian
(``lockstep.lifetime``) removes the run directory when rank 0 ends. Exit status: 0 finished, 1 timed out in a
collective
(hung), 3 another failure.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import ModuleType

from lockstep.impl import distributed, flight_recorder
from lockstep.impl.arguments import add_run_arguments, config_from_arguments
from lockstep.impl.distributed import CollectiveTimeout, Groups, share_object
from lockstep.impl.launcher import Watchdog, hang_diagnosis
from lockstep.impl.protocols import runtime_protocol
from lockstep.impl.runtime import AUTHKEY_ENVIRONMENT, RunConfig
from lockstep.lifetime import die_with_parent, guardian


def _join(protocol: ModuleType, config: RunConfig) -> Groups:
    """The protocol's ``join``, or the default one (``distributed.join``)."""
    joined: Groups = getattr(protocol, "join", distributed.join)(config)
    return joined


def _torchrun_config(argv: list[str]) -> RunConfig:
    parser = argparse.ArgumentParser(prog="python -m lockstep.impl.rank")
    add_run_arguments(parser)
    arguments = parser.parse_args(argv)
    config = config_from_arguments(arguments)
    config.ranks = int(os.environ["WORLD_SIZE"])
    return config


def pool_main(directory: Path) -> int:
    """A pooled rank (``lockstep.impl.pool``): join once, then run every run the pool hands over.

    The default group outlives the runs, so ``distributed.shutdown`` becomes a no-op in this
    process before the protocol's code is imported; each run's named groups are destroyed after
    it. A run's exit status goes to ``DIR/<n>.rank-<r>``; ``{"stop": true}`` ends the process."""
    import torch.distributed as dist

    import lockstep.impl.distributed as distributed

    distributed.shutdown = lambda: None
    base = RunConfig.read(directory / "pool.json")
    protocol = runtime_protocol(base.protocol).rank_module()
    groups = _join(protocol, base)
    number = 0
    while True:
        number += 1
        pointer = directory / f"{number}.json"
        while not pointer.exists():
            time.sleep(0.002)
        request = json.loads(pointer.read_text(encoding="utf-8"))
        if request.get("stop"):
            return 0
        config_path = str(request["config"])
        config = RunConfig.read(config_path)
        os.environ.update(flight_recorder.flight_recorder_environment(config, os.environ))  # before the run's groups
        dumper = flight_recorder.start(config, groups.rank, groups.groups, groups.runtime_only)
        try:
            code = int(protocol.run_rank(config, config_path, groups))
        except CollectiveTimeout as error:
            sys.stderr.write(f"lockstep: {error}\n")
            code = 1
        except Exception:
            traceback.print_exc()
            code = 3
        if dumper is not None:
            if code == 0:
                dumper.stop()
            else:  # stay for the pool's dump request (the pool kills the ranks after it)
                dumper.join(timeout=5.0)
        for group in groups.groups.values():
            dist.destroy_process_group(group)
        groups.groups.clear()
        groups.runtime_only.clear()
        report = directory / f".{number}.rank-{groups.rank}"
        report.write_text(str(code), encoding="utf-8")
        os.replace(report, directory / f"{number}.rank-{groups.rank}")
        if code != 0:
            return code  # the pool starts afresh after a run that did not complete


def main(argv: list[str]) -> int:
    under_torchrun = not argv[:1] or argv[0] not in ("--pool", "--config")
    if argv[:2] and argv[0] == "--pool":
        return pool_main(Path(argv[1]))
    if argv[:1] == ["--config"]:
        config_path = argv[1]
        config = RunConfig.read(config_path)
        protocol = runtime_protocol(config.protocol).rank_module()
        groups = _join(protocol, config)
    else:
        config = _torchrun_config(argv)
        os.environ.update(flight_recorder.flight_recorder_environment(config, os.environ))  # before torch's groups
        protocol = runtime_protocol(config.protocol).rank_module()
        groups = _join(protocol, config)
        shared = None
        if groups.rank == 0:
            run_dir = tempfile.mkdtemp(prefix="lockstep-run-", dir=os.environ.get("LOCKSTEP_RUN_ROOT"))
            if not os.environ.get("LOCKSTEP_KEEP_RUN_DIR"):  # no launcher removes it: rank 0's guardian does
                guardian().protect(directory=run_dir)
            config.run_dir = run_dir
            config.write(Path(run_dir) / "config.json")
            shared = (run_dir, secrets.token_hex(16))
        run_dir, key = share_object(shared)
        os.environ[AUTHKEY_ENVIRONMENT] = key
        config_path = str(Path(run_dir) / "config.json")
        config = RunConfig.read(config_path)
        if groups.rank == 0:  # no launcher watches a torchrun run: rank 0 diagnoses a hang itself
            Watchdog(config).start()
    dumper = flight_recorder.start(config, groups.rank, groups.groups, groups.runtime_only)
    try:
        return int(protocol.run_rank(config, config_path, groups))
    except CollectiveTimeout as error:
        sys.stderr.write(f"lockstep: {error}\n")
        if under_torchrun:  # no launcher: this rank may be the first to know (rank 0's watchdog races it)
            sys.stderr.write(hang_diagnosis(config.run_dir))
        sys.stderr.flush()
        if dumper is not None:  # the group's timeout came first: stay for the launcher's dump request
            dumper.join(timeout=5.0)
        return 1
    except Exception:
        traceback.print_exc()
        return 3


if __name__ == "__main__":
    die_with_parent()  # started by the launcher or a pool (or torchrun): it ends with its parent
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no teardown of groups whose peers are gone
