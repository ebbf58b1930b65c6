"""What a model's abstraction ledger (docs/models/<protocol>.md) leaves unnamed: shared by the
ledger tests of each protocol, so a model that adds a mirrored function, an action, a property or
a variant fails its test until the ledger says what it is."""

from __future__ import annotations

from lockstep.changes import mirrored_names
from lockstep.spec.protocol import Protocol

BUILT_IN = {"in_bounds", "well_defined"}  # every model's own properties: the ledgers do not list them


def unnamed(protocol: Protocol, text: str) -> dict[str, list[str]]:
    """Per kind (mirrored, action, property, variant), the names of every instance × variant's
    machine that ``text`` does not mention (actions, properties and variants in backquotes)."""
    machines = [
        protocol.instance(variant.name, instance.name).machine()
        for variant in protocol.variants
        for instance in protocol.instances
    ]
    mirrored = {name for machine in machines for action in machine.actions for name in mirrored_names(action.mirrors)}
    actions = {action.name for machine in machines for action in machine.actions}
    properties = {item.name for machine in machines for item in machine.properties} - BUILT_IN
    return {
        "mirrored": sorted(name for name in mirrored if name not in text),
        "action": sorted(name for name in actions if f"`{name}`" not in text),
        "property": sorted(name for name in properties if f"`{name}`" not in text),
        "variant": [variant.name for variant in protocol.variants if f"`{variant.name}`" not in text],
    }
