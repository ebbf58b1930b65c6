"""dp-step-coordination: the collectives every DP rank posts per engine step, and whether they line up.

The model (``model.py``) mirrors vLLM v0.24.0 (``pre-fix``) and v0.33.0 (``post-fix``) and opens
with the story of a step; ``docs/models/dp-step-coordination.md`` says what it covers and leaves out.
"""

from lockstep.models.dp_step_coordination.model import POST_FIX, PRE_FIX, PROTOCOL, build

__all__ = ["POST_FIX", "PRE_FIX", "PROTOCOL", "build"]
