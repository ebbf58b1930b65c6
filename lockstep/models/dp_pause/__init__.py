"""dp-pause: data-parallel engine waves and the two-phase pause of vLLM PR #39366.

The model (``model.py``) mirrors vLLM v0.20.0 (``pre-fix``) and v0.21.0 (``post-fix``) and opens
with the story of issue #36594; ``lemmas.py`` states the SUM-vote lemma for every dp_size.
"""

from lockstep.models.dp_pause.lemmas import LEMMAS
from lockstep.models.dp_pause.model import POST_FIX, PRE_FIX, PROTOCOL, build, sync_dp_state

__all__ = ["LEMMAS", "POST_FIX", "PRE_FIX", "PROTOCOL", "build", "sync_dp_state"]
