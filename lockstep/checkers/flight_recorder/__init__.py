"""Flight-recorder dumps (read by ``lockstep.traces.flight_recorder``) judged two ways: without a
model, by lining up each group's collectives and send/recv pairs (``diagnosis``); and against a
model, by mapping groups to communicators (``projection``) and searching for an execution whose
projection is the dumps (``model_check``)."""
