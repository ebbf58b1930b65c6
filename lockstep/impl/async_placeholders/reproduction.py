"""From an async-placeholders model path to a runtime run that takes the same choices (torch-free).

``plan(header, events)`` reads a counterexample (or a ``test-runtime`` goal path) and returns a
``Reproduction``: the scenario of the header's instance (the runtime's scenarios are the model's
instances; its parameters must be the instance's, but ``max_tokens``, a runtime setting), one rank,
``interruptions`` as many as the path's non-producing steps (at least the setting's default), and
the scheduler's and runner's scripted choices in the path's order:

- the scheduler loop's ``next`` per scheduler event: ``schedule``, ``process``
  (``update_from_output``) or ``kv_load_failure``;
- per ``schedule(kind, chunk, drafts, history)``: ``kind`` (``run``, ``chunk``, ``skip``,
  ``preempt``), ``drafts`` where the runtime asks it (a run of a request past its prefill with
  speculative tokens on: the plan follows the tracked request's ``prefilling`` through the path),
  ``history`` where the instance toggles it;
- per ``kv_load_failure(discarded)``: ``discarded``;
- per ``bookkeeping(accepted)`` of a step with drafts: the runner's ``accepted``.

When the device-to-host copy lands is the runtime's own choice (the model does not order it), so
the seed decides it, as it decides everything past the path's end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lockstep.impl.choices import Choice
from lockstep.impl.protocols import Reproduction
from lockstep.models.async_placeholders.model import PROTOCOL

SCHEDULER, RUNNER = "scheduler", "runner"
NEXT = {"schedule": "schedule", "update_from_output": "process", "kv_load_failure": "kv_load_failure"}


def _kind(args: Mapping[str, Any]) -> str:
    kind, chunk = str(args["kind"]), bool(args["chunk"])
    picked = {"RUN": "chunk" if chunk else "run", "SKIP": "skip", "PREEMPT": "preempt"}.get(kind)
    if picked is None:
        raise ValueError(f"schedule with an unknown kind {kind!r}")
    return picked


def plan(header: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> Reproduction:
    from lockstep.impl.async_placeholders import RUNTIME

    parameters = header["parameters"]
    scenario = str(header.get("instance"))
    instances = {instance.name: instance for instance in PROTOCOL.instances}
    if scenario not in instances:
        raise ValueError(f"the runtime runs the model's instances ({', '.join(instances)}), not {scenario!r}")
    expected = {parameter.name: parameter.default for parameter in PROTOCOL.parameters}
    expected.update(instances[scenario].parameters)
    different = [
        f"{name}={parameters[name]}"
        for name, value in expected.items()
        if name != "max_tokens" and name in parameters and int(parameters[name]) != value
    ]
    if different:
        raise ValueError(f"the runtime runs instance {scenario} as declared; this path has {', '.join(different)}")
    speculative = expected["num_spec_tokens"] > 0
    choices: list[Choice] = []
    prefilling, interruptions, drafts_of = True, 0, []  # drafts per scheduled step, in order
    for event in events:
        action, args = str(event["action"]), event.get("args", {})
        if action in NEXT:
            choices.append(Choice(SCHEDULER, "next", (), NEXT[action]))
        if action == "schedule":
            picked = _kind(args)
            choices.append(Choice(SCHEDULER, "kind", (), picked))
            interruptions += picked != "run"
            drafts = int(args.get("drafts", 0))
            if picked == "run" and not prefilling and speculative:
                choices.append(Choice(SCHEDULER, "drafts", (), str(drafts)))
            if expected["history_toggles"]:
                choices.append(
                    Choice(SCHEDULER, "history", (), "needed" if args.get("history", True) else "not-needed")
                )
            prefilling = {"run": False, "preempt": True}.get(picked, prefilling)
            drafts_of.append(drafts)
        elif action == "kv_load_failure":
            choices.append(Choice(SCHEDULER, "discarded", (), str(int(args["discarded"]))))
            prefilling = True
        elif action == "bookkeeping":
            drafts = drafts_of.pop(0) if drafts_of else 0
            if drafts:
                choices.append(Choice(RUNNER, "accepted", (), str(int(args["accepted"]))))
    default = RUNTIME.settings["interruptions"].default
    extra = {"interruptions": max(default, interruptions), "max_tokens": int(parameters.get("max_tokens", 4))}
    return Reproduction(scenario=scenario, ranks=1, choices=choices, extra=extra)
