"""The JSON Schemas of every ``--json`` output of the ``lockstep`` command, shipped in the wheel.

One file per command (``check``, ``list``, ``prove-lemmas``, ``fuzz``, ``replay``, ``run``,
``reproduce``, ``test-runtime``, ``vllm check``: ``vllm-check``) and ``error.schema.json`` for the
object a ``--json`` command prints when it ends without a result (a usage error, a model or
internal error, a limit, Ctrl-C, SIGTERM). Every
object carries a ``schema_version``. These files are the one source: the docs point here, and
``tests/test_schemas.py`` validates real outputs against them. The trace format's schema is
``lockstep.traces.format.schema()``.
"""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

NAMES = ("check", "list", "prove-lemmas", "fuzz", "replay", "run", "reproduce", "test-runtime", "vllm-check", "error")


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema of ``name``'s ``--json`` output (one of ``NAMES``)."""
    if name not in NAMES:
        raise ValueError(f"no schema {name!r}; schemas: {', '.join(NAMES)}")
    document: dict[str, Any] = json.loads(files(__name__).joinpath(f"{name}.schema.json").read_text(encoding="utf-8"))
    return document
