"""The built-in protocol models, one module each, and the registry the tools look them up in."""

from __future__ import annotations

from lockstep.models import dp_pause
from lockstep.spec.lemma import Lemma
from lockstep.spec.protocol import Protocol, UsageError

PROTOCOLS: dict[str, Protocol] = {protocol.name: protocol for protocol in (dp_pause.PROTOCOL,)}
LEMMAS: tuple[Lemma, ...] = (*dp_pause.LEMMAS,)


def get_protocol(name: str) -> Protocol:
    """The protocol called ``name``; a ``UsageError`` listing the known ones otherwise."""
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise UsageError(f"unknown protocol {name!r}; known protocols: {', '.join(PROTOCOLS)}") from None
