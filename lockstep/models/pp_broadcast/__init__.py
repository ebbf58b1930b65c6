"""pp-broadcast: the PP sampled-token broadcast skipped on all-chunked-prefill steps, vLLM PR #38726.

The model (``model.py``) mirrors vLLM v0.19.0 (``pre-fix``) and v0.20.0 (``post-fix``) and opens
with the story of the stuck chunked pipeline; two mutants show why the fix has its shape. Every later
release to v0.33.0 is a variant or a row of ``releases.BISECTION`` (``variants.py`` lists what each
has), with sync scheduling, speculative decoding, structured output and the V2 runner
(``handler.py``) as parameters. Its state is declared once in ``state.py``; the actions live with
their actor (``engine.py``, ``worker.py``, ``handler.py``, ``stream.py``) and the properties in
``properties.py``; ``docs/models/pp-broadcast.md`` is its ledger.
"""

from lockstep.models.pp_broadcast.model import POST_FIX, PRE_FIX, PROTOCOL, build

__all__ = ["POST_FIX", "PRE_FIX", "PROTOCOL", "build"]
