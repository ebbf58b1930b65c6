"""Actions as named, module-level units: the ``action`` decorator and the definitions it makes.

A model declares each action once, beside the vLLM function it mirrors, as an ordinary function
of the model's typed state (and any other context it needs) plus one Term per action parameter:

    @action(actor="rank:{rank}", mirrors="DPEngineCoreProc.add_request")
    def handle_add(model: Model, rank: Term) -> Step:
        "The engine core takes an ADD from its input queue."
        ...

and ``build`` binds it into a machine with the sorts of its parameters:
``machine.add(handle_add, model, rank=model.Rank)``. The definition stays callable, so a test can
run one action on its own.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, ParamSpec, Protocol

if TYPE_CHECKING:
    from lockstep.spec.machine import Step

Arguments = ParamSpec("Arguments")


@dataclass(frozen=True)
class ActionDefinition(Generic[Arguments]):
    """A named action before it is bound to a machine: its function, actor template and sources."""

    name: str
    actor: str
    function: Callable[Arguments, Step]
    description: str = ""
    mirrors: str = ""

    def __call__(self, *arguments: Arguments.args, **keywords: Arguments.kwargs) -> Step:
        return self.function(*arguments, **keywords)


def action(
    *, actor: str, name: str | None = None, mirrors: str = "", description: str = ""
) -> Callable[[Callable[Arguments, Step]], ActionDefinition[Arguments]]:
    """Declare a module-level action. ``actor`` is a template over the action's parameters (e.g.
    ``"rank:{rank}"``); ``mirrors`` names the source function(s) it stands for; the description
    defaults to the function's docstring and the name to the function's name."""

    def define(function: Callable[Arguments, Step]) -> ActionDefinition[Arguments]:
        return ActionDefinition(
            name or function.__name__, actor, function, description or inspect.cleandoc(function.__doc__ or ""), mirrors
        )

    return define


class Rebinding(Protocol):
    """What ``Machine.add`` asks while a model is built under an overlay (``lockstep.spec.overlay``):
    the definition to bind in place of one, and the overlay's actions bound with the same context."""

    def replacement(self, definition: ActionDefinition[...], context: Sequence[object]) -> ActionDefinition[...]: ...

    def companions(self, name: str) -> list[ActionDefinition[...]]: ...


# set only while ``Overlay`` builds its base model (a context variable: other builds never see it)
REBINDING: ContextVar[Rebinding | None] = ContextVar("lockstep_rebinding", default=None)
