"""The variants of pp-broadcast: vLLM v0.19.0 and v0.20.0, and two mutants of v0.20.0.

Only ``sample_tokens`` (``worker.py``) tells them apart: whether a rank leaves out the broadcast
of a step, and (``skip-whole-receive``) whether a skipping non-last rank rebuilds its state.
"""

from __future__ import annotations

from lockstep.spec.protocol import POST_FIX as POST_FIX  # the variant names, defined once in spec
from lockstep.spec.protocol import PRE_FIX as PRE_FIX

SKIP_DISAGREE = "skip-disagree"  # the last rank skips when all rows are discarded, others when no row decodes
SKIP_WHOLE_RECEIVE = "skip-whole-receive"  # non-last ranks skip all of the receive on all-chunked steps
