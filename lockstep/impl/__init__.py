"""lockstep.impl: the torch reference runtime.

Real processes and real ``torch.distributed`` collectives (gloo on CPU by default, NCCL on GPUs)
running a protocol's pre-fix or post-fix behaviour and recording lockstep traces. This is the
only package that imports torch eagerly; it imports only ``lockstep.traces`` and the models'
action names. Its parts:

- ``choices``: the one choice source every nondeterministic choice goes through.
- ``runtime``: run configuration, status boards, trace recorders, input queues, sockets.
- ``distributed``: torchrun-compatible initialisation, groups, traced collectives (torch).
- ``launcher``: spawn a run, diagnose a hang, kill everything, report the outcome.
- ``protocols``: the registry of runtime protocols (variants, scenarios, ranks, settings, package).
- ``rank``: the entry point of a rank process (spawned, or under torchrun).
- ``dp_pause``: the dp-pause protocol (engine cores, coordinator, client, scenarios).

Importing this package imports no torch; the modules that need it import it.
"""
