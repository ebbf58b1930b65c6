"""pd-kv-transfer: the disaggregated-prefill (P/D) KV hand-off through vLLM's NIXL connector.

The model (``model.py``) mirrors vLLM v0.29.0 (``pre-fix``) and v0.33.0 (``post-fix``) and opens
with the story of the hand-off; ``docs/models/pd-kv-transfer.md`` says what it covers and leaves out.
"""

from lockstep.models.pd_kv_transfer.model import POST_FIX, PRE_FIX, PROTOCOL, build

__all__ = ["POST_FIX", "PRE_FIX", "PROTOCOL", "build"]
