"""The variants of cudagraph-pp: vLLM v0.18.0 and v0.19.0, the mutants of v0.19.0, and what each changes.

``Variant`` names the few facts the actions ask (``variant.copies_in``, ``variant.waits_on_sends``,
...), so the difference stays visible at the line of the action that it changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from lockstep.spec.protocol import POST_FIX as POST_FIX  # the variant names, defined once in spec
from lockstep.spec.protocol import PRE_FIX as PRE_FIX

NO_PERSISTENT_BUFFER = "no-persistent-buffer"  # v0.19.0 capture, received tensors handed straight in
NO_COPY_IN = "no-copy-in"  # persistent buffer without the copy (vLLM V1 #13353 before #13417)
MISSING_KEY = "missing-key"  # the sender's tensors lack a key the persistent buffer has
FULL_ADJUSTMENT = "full-adjustment"  # #35162's proposed num_reqs adjustment applied to FULL graphs
NO_SEND_WAIT = "no-send-wait"  # the next step does not wait on the previous step's send handles

MUTANTS = (NO_PERSISTENT_BUFFER, NO_COPY_IN, MISSING_KEY, FULL_ADJUSTMENT, NO_SEND_WAIT)


@dataclass(frozen=True)
class Variant:
    """One variant, by name, and the facts about it that the actions read."""

    name: str

    @property
    def eager_only(self) -> bool:
        """v0.18.0: capture_model returns early with PP ("Pipeline parallel is currently eager-only")."""
        return self.name == PRE_FIX

    @property
    def persistent_buffer(self) -> bool:
        """load_model allocates the persistent intermediate-tensor buffer that graphs are captured on."""
        return self.name not in (PRE_FIX, NO_PERSISTENT_BUFFER)

    @property
    def copies_in(self) -> bool:
        """execute_model copies the received tensors into the persistent buffer before the forward."""
        return self.persistent_buffer and self.name != NO_COPY_IN

    @property
    def waits_on_sends(self) -> bool:
        """Worker.execute_model first waits on the previous step's send handles (``_pp_send_work``)."""
        return self.name != NO_SEND_WAIT
