"""The dp-pause ledger (docs/models/dp-pause.md) checked against the model: every action, every name an action
mirrors, every property and every variant appear in it, and its release table is the model's ``release_table``."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockstep.changes import mirrored_names
from lockstep.models import get_protocol
from lockstep.spec.machine import Machine

PROTOCOL = get_protocol("dp-pause")
LEDGER = Path(__file__).resolve().parent.parent / "docs" / "models" / "dp-pause.md"


@pytest.fixture(scope="module")
def machines() -> list[Machine]:
    """The machine of every variant × instance (the release variants add actions and properties)."""
    return [
        PROTOCOL.instance(variant.name, instance.name).machine()
        for variant in PROTOCOL.variants
        for instance in PROTOCOL.instances
    ]


@pytest.fixture(scope="module")
def ledger() -> str:
    return LEDGER.read_text(encoding="utf-8")


def test_the_ledger_names_every_action_and_every_mirrored_function(machines: list[Machine], ledger: str) -> None:
    """An action, or a name an action mirrors, that the model adds fails this test until the ledger says what it is
    and which v0.33.0 paths it has."""
    actions = {action.name for machine in machines for action in machine.actions}
    assert not [name for name in sorted(actions) if f"`{name}`" not in ledger]
    mirrored = {name for machine in machines for action in machine.actions for name in mirrored_names(action.mirrors)}
    assert not sorted(name for name in mirrored if name not in ledger)


def test_the_ledger_names_every_property_and_variant(machines: list[Machine], ledger: str) -> None:
    properties = {item.name for machine in machines for item in machine.properties}
    assert not [name for name in sorted(properties) if f"`{name}`" not in ledger]
    assert not [variant.name for variant in PROTOCOL.variants if f"`{variant.name}`" not in ledger]


def test_every_property_row_names_a_source_line(machines: list[Machine], ledger: str) -> None:
    """Every declared property but the built-in well-formedness checks and the witnesses has a row in the
    properties table whose source column names a file and line of the release."""
    table = ledger[ledger.index("| property | states | source") : ledger.index("### Asserts")]
    rows = {line.split("|")[1].strip(): line.split("|")[3] for line in table.splitlines()[2:] if line.startswith("| ")}
    properties = {item.name for machine in machines for item in machine.properties}
    unsourced = sorted(
        name
        for name in properties - {"in_bounds", "well_defined", "resumed", "second_client_adds_while_paused"}
        if not any(f".py {digit}" in rows.get(f"`{name}`", "") for digit in "123456789")
    )
    assert not unsourced


def test_the_ledger_release_table_is_the_models_release_table(ledger: str) -> None:
    """Every release the ledger lists maps to the variant it names, and every release of the model's table is
    listed (0.20.1 and 0.20.2, absent from the table, map to pre-fix through it)."""
    table = ledger[ledger.index("| release | variant |") : ledger.index("## Features")]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:] if line.startswith("| ")]
    listed = {
        (release.strip(), variant.strip().strip("`"))
        for releases, variant in rows
        for release in releases.split(",")
        if release.strip()
    }
    assert {(release, variant) for release, variant in PROTOCOL.release_table} <= listed
    for release, variant in sorted(listed):
        found = PROTOCOL.release_variant(release)
        assert found is not None and found.name == variant, release
    assert PROTOCOL.release_variant("0.19.1") is None
