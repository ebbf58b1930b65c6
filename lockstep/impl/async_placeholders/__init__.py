"""async-placeholders in the reference runtime: the last PP rank's runner with async scheduling,
mirroring ``lockstep/models/async_placeholders/model.py`` (vLLM v0.21.0 pre-fix: forward scan;
v0.22.0 post-fix: backward scan). ``scans`` (the two scans and the row repair, pure Python),
``batch`` (``InputBatch`` and the async device-to-host copy), ``scheduler``, ``runner``,
``engine`` (the loop and threads), ``parameters`` (trace header), ``rank``. The scenarios are the
model's instances. ``RUNTIME`` registers it with ``lockstep.impl.protocols``; this module imports
no torch.
"""

from __future__ import annotations

from lockstep.impl.protocols import RuntimeProtocol, Setting
from lockstep.models.async_placeholders.model import POST_FIX, PRE_FIX, PROTOCOL

RUNTIME = RuntimeProtocol(
    name="async-placeholders",
    package="lockstep.impl.async_placeholders",
    variants=(PRE_FIX, POST_FIX),
    scenarios=tuple(instance.name for instance in PROTOCOL.instances),
    ranks=(1, 1),
    default_ranks=1,
    settings={
        "max_tokens": Setting(4, 1, 8, "outputs of the tracked request (the model's list bound)"),
        "background": Setting(2, 1, 127, "other requests decoding in the batch"),
        "interruptions": Setting(2, 0, 8, "non-producing steps (chunks, skips, preemptions) a run may take"),
    },
    summary="the last PP rank's runner: -1 placeholders, the async copy and the repair scan",
    reproduction="lockstep.impl.async_placeholders.reproduction",
    choice_actors=("scheduler", "runner", "copy"),  # the scheduler loop, the runner thread, the async copy
)
