"""The ``list`` and ``prove-lemmas`` commands, and the models a command works on.

``command_list`` writes the protocols, their variants and instances to stdout (a listing is a
result: ``lockstep list | grep dp-pause``), or with ``--json`` one object
(``lockstep/schemas/list.schema.json``). ``command_prove_lemmas`` proves the built-in lemmas with
Z3: exit 0 iff every outcome is the expected one, 3 if any is unknown, 1 otherwise (``--json``:
``prove-lemmas.schema.json``). ``selected_protocols`` is the model file's protocol, the named
one, or every built-in one.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.console import Console

from lockstep.cli.invocation import clock
from lockstep.models import PROTOCOLS, get_protocol
from lockstep.models.external import load_model_file
from lockstep.spec.protocol import Protocol, UsageError
from lockstep.traces.output import write_stdout

EXIT_OK, EXIT_VIOLATED, EXIT_INCONCLUSIVE = 0, 1, 3
LIST_SCHEMA_VERSION = 1  # of list's --json object
LEMMAS_SCHEMA_VERSION = 1  # of prove-lemmas' --json object


def selected_protocols(arguments: argparse.Namespace) -> list[Protocol]:
    """The protocols a command works on: the model file's, the named one, or every built-in one."""
    if arguments.model_file is not None:
        timer = clock(arguments)  # the command's clock: importing the file counts
        left = timer.left()
        protocol = load_model_file(
            arguments.model_file, timeout=None if left is None else max(0.001, left), stated=timer.timeout
        )
        named = getattr(arguments, "protocol", None)
        if named and named != protocol.name:
            raise UsageError(f"{arguments.model_file} defines protocol {protocol.name!r}, not {named!r}")
        return [protocol]
    named = getattr(arguments, "protocol", None)
    return [get_protocol(named)] if named else list(PROTOCOLS.values())


def one_protocol(arguments: argparse.Namespace) -> Protocol:
    """The protocol a command on one model works on: the model file's, or the named one."""
    if arguments.model_file is None and not getattr(arguments, "protocol", None):
        raise UsageError("name a protocol (see `lockstep list`) or give --model-file PATH")
    return selected_protocols(arguments)[0]


def command_list(arguments: argparse.Namespace, console: Console) -> int:
    """The models, on stdout (a listing is a result: ``lockstep list | grep dp-pause``)."""
    from rich.table import Table

    protocols = selected_protocols(arguments)
    if arguments.json:
        write_stdout(
            json.dumps(
                {
                    "schema_version": LIST_SCHEMA_VERSION,
                    "protocols": [_protocol_json(protocol) for protocol in protocols],
                }
            )
            + "\n"
        )
        return EXIT_OK
    console = Console(width=None if sys.stdout.isatty() else 160, emoji=False)
    table = Table(title="lockstep models", title_justify="left")
    for column in ("protocol", "change", "variant", "stands for", "instances (default *)", "parameters"):
        table.add_column(column)
    for protocol in protocols:
        instances = ", ".join(
            f"{instance.name}{'*' if instance.name == protocol.default_instance else ''}"
            for instance in protocol.instances
        )
        parameters = ", ".join(f"{parameter.name}={parameter.default}" for parameter in protocol.parameters)
        for position, variant in enumerate(protocol.variants):
            default = "*" if variant.name == protocol.default_variant else ""
            first = position == 0
            table.add_row(
                protocol.name if first else "",
                protocol.change if first else "",
                f"{variant.name}{default}",
                f"{variant.release}: {variant.description}",
                instances if first else "",
                parameters if first else "",
            )
    console.print(table)
    pins = Table(title="instances and their pinned verdicts", title_justify="left")
    for column in ("protocol", "instance", "expected", "scenario"):
        pins.add_column(column)
    for protocol in protocols:
        for instance in protocol.instances:
            expected = ", ".join(f"{variant}: {verdict}" for variant, verdict in instance.expected.items())
            pins.add_row(protocol.name, instance.name, expected, instance.description)
    console.print(pins)
    console.print(_proof_table(protocols))
    return EXIT_OK


def _proof_table(protocols: list[Protocol]) -> Any:
    """Per post-fix seed safety property: proved for all depths by pdr (pinned, ``check --all
    --proofs``), or checked exhaustively at the pinned sizes (``check --all``). The pins were
    measured with ABC's pdr; an install without it is told so rather than promised them."""
    from rich.table import Table
    from rich.text import Text

    from lockstep.checkers.symbolic import abc
    from lockstep.models.proofs import BUDGET, PINNED, proved_for_all_ranks, status
    from lockstep.spec.machine import PropertyKind

    with_abc = abc.binary() is not None
    table = Table(
        title=f"post-fix seed safety properties (pdr proofs pinned at {BUDGET:.0f} s per property; "
        "sizes: the seed's, all-sizes facts: prove-lemmas)",
        title_justify="left",
        caption=None
        if with_abc
        else Text(
            f"{abc.NOT_INSTALLED}: this install's pdr is Houdini and Spacer alone, which may leave these "
            "inconclusive; check --all --proofs needs ABC"
        ),
        caption_justify="left",
    )
    proved_column = "proved for all depths (pdr)" if with_abc else "proved for all depths by pdr with ABC (not here)"
    for column in (
        "protocol",
        "proved for all N (prove --all-ranks)",
        proved_column,
        "checked exhaustively at the pinned sizes",
    ):
        table.add_column(column)
    for protocol in protocols:
        if "post-fix" not in [variant.name for variant in protocol.variants]:
            continue
        names = [
            prop.name for prop in protocol.instance("post-fix").machine().properties if prop.kind is PropertyKind.ALWAYS
        ]
        proved = [name for name in names if status(protocol.name, name) == "proved for all depths"]
        exhaustive = [name for name in names if name not in proved]
        if protocol.name not in PINNED:
            exhaustive = [f"{', '.join(exhaustive)} (no pdr proofs pinned)"]
        every_n = [name for name in names if proved_for_all_ranks(protocol.name, name)]
        table.add_row(protocol.name, ", ".join(every_n) or "-", ", ".join(proved) or "-", ", ".join(exhaustive) or "-")
    return table


def _protocol_json(protocol: Protocol) -> dict[str, Any]:
    return {
        "name": protocol.name,
        "title": protocol.title,
        "change": protocol.change,
        "default_variant": protocol.default_variant,
        "default_instance": protocol.default_instance,
        "variants": [
            {"name": variant.name, "release": variant.release, "description": variant.description}
            for variant in protocol.variants
        ],
        "parameters": [
            {
                "name": parameter.name,
                "default": parameter.default,
                "minimum": parameter.minimum,
                "maximum": parameter.maximum,
                "description": parameter.description,
            }
            for parameter in protocol.parameters
        ],
        "instances": [
            {
                "name": instance.name,
                "description": instance.description,
                "parameters": dict(instance.parameters),
                "expected": dict(instance.expected),
            }
            for instance in protocol.instances
        ],
    }


def command_prove_lemmas(arguments: argparse.Namespace, console: Console) -> int:
    """Exit 0 iff every lemma's outcome is its expected one; 3 if any is unknown; 1 otherwise."""
    from rich.table import Table

    from lockstep.checkers.symbolic.lemmas import prove
    from lockstep.models import LEMMAS

    outcomes = [prove(lemma, solver_timeout=arguments.solver_timeout) for lemma in LEMMAS]
    if arguments.json:
        rows = [
            {
                "lemma": item.lemma.name,
                "expected": item.lemma.expected,
                "outcome": item.outcome,
                "seconds": round(item.seconds, 3),
                "detail": item.detail,
                "counterexample": None if item.counterexample is None else repr(item.counterexample),
            }
            for item in outcomes
        ]
        write_stdout(
            json.dumps(
                {
                    "schema_version": LEMMAS_SCHEMA_VERSION,
                    "lemmas": rows,
                    "as_expected": all(item.as_expected for item in outcomes),
                }
            )
            + "\n"
        )
    else:
        table = Table(title="lockstep prove-lemmas", title_justify="left")
        for column in ("lemma", "expected", "outcome", "seconds", "detail"):
            table.add_column(column)
        for item in outcomes:
            style = "green" if item.as_expected else "bold red"
            table.add_row(
                item.lemma.name,
                item.lemma.expected,
                f"[{style}]{item.outcome}[/{style}]",
                f"{item.seconds:.2f}",
                item.detail,
            )
        console.print(table)
    if all(item.as_expected for item in outcomes):
        return EXIT_OK
    if any(item.outcome == "unknown" for item in outcomes):
        return EXIT_INCONCLUSIVE
    return EXIT_VIOLATED
