"""async-placeholders: the -1 output placeholders of async scheduling and their repair (PR #42938).

The model (``model.py``) mirrors vLLM v0.21.0 (``pre-fix``, forward scan), v0.22.0
(``post-fix``, backward scan) and v0.27.0 (``v0.27.0``, stale output after preemption; ``releases.py``
maps v0.19.0-v0.33.0) and opens with the story; ``state.py`` declares the sorts and
variables, ``scheduler.py`` the scheduler's actions, ``runner.py`` the last rank's runner,
``properties.py`` the properties; ``scans.py`` states both scans once, as folds, for the model
and for ``lemmas.py``, which proves them equal on every list of the form real* (-1)+.
"""

from lockstep.models.async_placeholders.lemmas import LEMMAS
from lockstep.models.async_placeholders.model import POST_FIX, PRE_FIX, PROTOCOL, build

__all__ = ["LEMMAS", "POST_FIX", "PRE_FIX", "PROTOCOL", "build"]
