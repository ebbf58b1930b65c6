"""cudagraph-pp: CUDA graphs with pipeline parallelism in the V2 model runner (vLLM PR #35162).

The model (``model.py``) mirrors vLLM v0.18.0 (``pre-fix``: eager-only with PP) and v0.19.0
(``post-fix``: persistent intermediate-tensor buffers) and opens with the story; its state is
declared once in ``state.py`` and its actions live with their actor (``capture.py``, ``engine.py``,
``rank.py``); ``descriptors.py`` mirrors the descriptor plan and dispatch of ``cudagraph_utils``;
``lemmas.py`` states the lemma of #35162's proposed num_reqs adjustment for all sizes.
"""

from lockstep.models.cudagraph_pp.descriptors import adjusted_num_reqs
from lockstep.models.cudagraph_pp.lemmas import LEMMAS
from lockstep.models.cudagraph_pp.model import POST_FIX, PRE_FIX, PROTOCOL, build

__all__ = ["LEMMAS", "POST_FIX", "PRE_FIX", "PROTOCOL", "adjusted_num_reqs", "build"]
