"""The ``prove --all-ranks`` command: a protocol's safety properties for every number of ranks.

Runs ``lockstep.checkers.symbolic.all_ranks.prove_all_ranks`` on the named protocol's variant and
instance and renders per property "proved for all N" or "open" with the reason, the quantified
invariant in the model's words, and the CPU seconds; ``--json`` gives the same as one object.
Exit 0 when every property is proved for all N, 3 when some stay open, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json

from rich.console import Console

from lockstep.cli.listing import EXIT_INCONCLUSIVE, EXIT_OK
from lockstep.models import get_protocol
from lockstep.spec.protocol import UsageError
from lockstep.traces.output import write_stdout

PROVE_SCHEMA_VERSION = 1  # of prove --all-ranks' --json object


def command_prove(arguments: argparse.Namespace, console: Console) -> int:
    from lockstep.checkers.symbolic.all_ranks import PROVED, prove_all_ranks

    if not arguments.all_ranks:
        raise UsageError("prove needs --all-ranks (proofs for every number of ranks are its only mode)")
    if not arguments.protocol:
        raise UsageError("name a protocol (see `lockstep list`)")
    protocol = get_protocol(arguments.protocol)
    if protocol.rank_parameter is None:
        raise UsageError(f"protocol {protocol.name} has no rank parameter; --all-ranks does not apply")
    instance = protocol.instance(arguments.variant, arguments.instance)
    result = prove_all_ranks(
        protocol, instance.variant, instance.name, instance.parameters, cpu_budget=arguments.cpu_budget
    )
    if arguments.json:
        document = {
            "schema_version": PROVE_SCHEMA_VERSION,
            "protocol": result.protocol,
            "variant": result.variant,
            "instance": result.instance,
            "properties": [
                {"name": item.name, "status": item.status, "reason": item.reason} for item in result.properties
            ],
            "invariant": result.invariant,
            "rechecked": result.rechecked,
            "candidates": result.candidates,
            "kept": result.kept,
            "sizes_matched": list(result.sizes_matched),
            "cpu_seconds": round(result.cpu_seconds, 2),
            "notes": result.notes,
        }
        write_stdout(json.dumps(document) + "\n")
    else:
        from rich.table import Table

        table = Table(
            title=f"lockstep prove {result.protocol} --all-ranks ({result.variant}, {result.instance})",
            title_justify="left",
        )
        for column in ("property", "for every N >= 2", "why (open)"):
            table.add_column(column)
        for item in result.properties:
            style = "green" if item.status == PROVED else "yellow"
            table.add_row(item.name, f"[{style}]{item.status}[/{style}]", item.reason)
        console.print(table)
        sizes = result.sizes_matched
        matched = f"{sizes[0]}-{sizes[-1]}" if sizes else "none"
        console.print(
            f"the model is one family in its rank count (compared node for node at {matched} ranks); "
            f"candidates {result.candidates}, kept {result.kept}; "
            f"{'re-checked by separate Z3 queries' if result.rechecked else 'nothing to re-check'}; "
            f"{result.cpu_seconds:.1f} s CPU"
        )
        for note in result.notes:
            console.print(f"note: {note}")
        if result.invariant:
            console.print("invariant (every clause holds in every reachable state, for every N >= 2):")
            for line in result.invariant:
                console.print(f"  {line}", highlight=False, markup=False)
        else:
            console.print("invariant: the sorts of the variables alone (for every N >= 2)")
    return EXIT_OK if all(item.status == PROVED for item in result.properties) else EXIT_INCONCLUSIVE
