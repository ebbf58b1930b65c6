"""computed-tokens: the V2 model runner's CPU mirror of num_computed_tokens (vLLM PRs #40654, #42202).

The model (``model.py``) mirrors vLLM v0.21.0 (``pre-fix``) and v0.22.0 (``post-fix``) and opens
with the story; ``state.py`` declares the sorts and variables, ``scheduler.py`` the actions of the
scheduler and engine, ``runner.py`` those of each rank's V2 runner, ``properties.py`` U1-U6, and
``invariants.py`` the strengthening invariants that let k-induction prove U1, U3 and U4 of the
post-fix variant for every depth.
"""

from lockstep.models.computed_tokens.model import POST_FIX, PRE_FIX, PROTOCOL, build

__all__ = ["POST_FIX", "PRE_FIX", "PROTOCOL", "build"]
