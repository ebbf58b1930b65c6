"""pp-broadcast: the PP sampled-token broadcast skipped on all-chunked-prefill steps, vLLM PR #38726.

The model (``model.py``) mirrors vLLM v0.19.0 (``pre-fix``) and v0.20.0 (``post-fix``) and opens
with the story of the stuck chunked pipeline; two mutants show why the fix has its shape.
"""

from lockstep.models.pp_broadcast.model import POST_FIX, PRE_FIX, PROTOCOL, build

__all__ = ["POST_FIX", "PRE_FIX", "PROTOCOL", "build"]
