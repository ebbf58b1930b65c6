"""Trace JSON values as model values: re-exported from ``lockstep.spec.trace_values``.

The decoder lives in spec so that the protocol vocabulary (``lockstep.spec.vocabulary``), which
recorders check their events against, and replay read values the same way.
"""

from __future__ import annotations

from lockstep.spec.trace_values import ValueMismatch, decode, decode_key

__all__ = ["ValueMismatch", "decode", "decode_key"]
