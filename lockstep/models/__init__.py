"""The built-in protocol models, one package each, and the registry the tools look them up in.

A built-in model is any subpackage of ``lockstep.models`` that exports ``PROTOCOL`` (and, if it
has lemmas for all sizes, ``LEMMAS``); the registry discovers them, so adding a model never
means editing this file. Third-party models register through the ``lockstep.models`` entry-point
group (see ``lockstep.models.external``), and ``lockstep check --model-file PATH`` loads one from
a file.
"""

from __future__ import annotations

import importlib
import pkgutil

from lockstep.spec.lemma import AnyLemma
from lockstep.spec.protocol import POST_FIX, PRE_FIX, Protocol, UsageError

__all__ = ["LEMMAS", "POST_FIX", "PRE_FIX", "PROTOCOLS", "get_protocol"]

# The order of tables and of ``check --all``: the five vLLM protocols as DESIGN.md lists them.
_ORDER = ("pp_broadcast", "dp_pause", "async_placeholders", "computed_tokens", "cudagraph_pp")


def _builtin_modules() -> list[str]:
    names = [info.name for info in pkgutil.iter_modules(__path__) if info.ispkg]
    return sorted(names, key=lambda name: (_ORDER.index(name) if name in _ORDER else len(_ORDER), name))


def _discover() -> tuple[dict[str, Protocol], tuple[AnyLemma, ...]]:
    protocols: dict[str, Protocol] = {}
    lemmas: list[AnyLemma] = []
    for name in _builtin_modules():
        module = importlib.import_module(f"{__name__}.{name}")
        protocol = getattr(module, "PROTOCOL", None)
        if isinstance(protocol, Protocol):
            protocols[protocol.name] = protocol
            lemmas.extend(getattr(module, "LEMMAS", ()))
    return protocols, tuple(lemmas)


PROTOCOLS, LEMMAS = _discover()


def get_protocol(name: str) -> Protocol:
    """The protocol called ``name`` (built-in, then entry points); a ``UsageError`` listing the known ones."""
    if name in PROTOCOLS:
        return PROTOCOLS[name]
    from lockstep.models.external import entry_point_protocols

    external = entry_point_protocols()
    if name in external:
        return external[name]
    known = ", ".join([*PROTOCOLS, *external])
    raise UsageError(f"unknown protocol {name!r}; known protocols: {known}")
