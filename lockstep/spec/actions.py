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

This module also owns the **actor grammar**, the one rule for who acts, in models and traces alike:
a kind word (a lowercase letter, then lowercase letters, digits, ``_`` or ``-``), optionally ``:``
and an id (letters, digits, ``_``, ``.`` or ``-``): ``rank:1``, ``coordinator``, ``d-worker``,
``group:dp``. ``action`` checks a template's own text when it is declared, and ``Machine.add``
checks every actor the template renders to over its parameters' values, so a model never reaches
a counterexample trace the format refuses. The trace format states the same pattern
(``lockstep.traces.schema.ACTOR_PATTERN``; spec and traces import nothing of each other, and a
test holds the two equal).
"""

from __future__ import annotations

import inspect
import itertools
import re
import string
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, ParamSpec, Protocol

from lockstep.spec.terms import DefinitionError

if TYPE_CHECKING:
    from lockstep.spec.machine import Step
    from lockstep.spec.sorts import Sort

Arguments = ParamSpec("Arguments")

# The end is a lookahead rather than '$' (Python's '$' also matches before a trailing newline).
ACTOR_PATTERN = r"^[a-z][a-z0-9_-]*(:[A-Za-z0-9_.-]+)?(?![\s\S])"
ACTOR_GRAMMAR = (
    "a kind word (a lowercase letter, then lowercase letters, digits, '_' or '-'), optionally ':' and an id "
    "(letters, digits, '_', '.' or '-'), e.g. 'rank:1', 'coordinator', 'd-worker', 'group:dp'"
)
_ACTOR = re.compile(ACTOR_PATTERN)
_EVERY_COMBINATION = 100_000  # beyond this many argument combinations, each parameter's values are checked alone


def is_actor(text: str) -> bool:
    """Whether ``text`` is an actor name of the grammar (``ACTOR_GRAMMAR``)."""
    return _ACTOR.match(text) is not None


def template_fields(template: str, where: str = "an action") -> list[str]:
    """The parameter names an actor template formats (``"rank:{rank}"``: ``["rank"]``); a template
    Python's ``str.format`` cannot read is a ``DefinitionError``."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as error:
        raise DefinitionError(f"{where}: actor template {template!r} is not a format string: {error}") from None
    names = []
    for _, field, _, _ in parsed:
        if field is not None:
            name = re.split(r"[.\[]", field, maxsplit=1)[0]
            if not name.isidentifier():
                raise DefinitionError(
                    f"{where}: actor template {template!r} names an unknown parameter {field!r} (each field names a "
                    "parameter of the action, e.g. {rank})"
                )
            names.append(name)
    return names


def check_template_text(template: str, where: str) -> None:
    """The template's own text fits the grammar, whatever its parameters render to (each field
    read as the id ``x``): ``"rank:{rank}"`` passes, ``"D Worker"`` and ``"rank:{rank}:{step}"`` do not."""
    template_fields(template, where)
    sample = "".join(
        literal + ("x" if field is not None else "") for literal, field, _, _ in string.Formatter().parse(template)
    )
    if not is_actor(sample):
        raise DefinitionError(
            f"{where}: actor {template!r} does not fit the actor grammar: an actor is {ACTOR_GRAMMAR}"
        )


def check_actor(template: str, sorts: Mapping[str, Sort], where: str) -> None:
    """Every actor ``template`` renders to over the values of the parameters it names (``sorts``)
    fits the grammar; the message names the first that does not."""
    check_template_text(template, where)
    names = sorted(set(template_fields(template, where)))
    unknown = [name for name in names if name not in sorts]
    if unknown:
        raise DefinitionError(f"{where}: actor template {template!r} names an unknown parameter {unknown[0]!r}")
    rendered = {name: [sorts[name].render(value) for value in sorts[name].values()] for name in names}
    count = 1
    for texts in rendered.values():
        count *= len(texts)
    if count <= _EVERY_COMBINATION:
        choices: Iterator[tuple[str, ...]] = itertools.product(*(rendered[name] for name in names))
    else:  # each parameter's values, the others at their first
        choices = (
            tuple(text if other == name else rendered[other][0] for other in names)
            for name in names
            for text in rendered[name]
        )
    for values in choices:
        try:
            actor = template.format(**dict(zip(names, values)))
        except (AttributeError, IndexError, KeyError, ValueError) as error:
            raise DefinitionError(f"{where}: actor template {template!r} cannot be filled in: {error}") from None
        if not is_actor(actor):
            shown = ", ".join(f"{name}={value}" for name, value in zip(names, values))
            raise DefinitionError(
                f"{where}: actor {actor!r} (template {template!r}{' with ' + shown if shown else ''}) does not fit "
                f"the actor grammar: an actor is {ACTOR_GRAMMAR}"
            )


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
    ``"rank:{rank}"``) that renders to an actor of the grammar (``ACTOR_GRAMMAR``; its own text is
    checked here, every rendering when the action is bound); ``mirrors`` names the source
    function(s) it stands for; the description defaults to the function's docstring and the name to
    the function's name. (An overlay's action may leave ``actor`` empty: the base action's.)"""

    def define(function: Callable[Arguments, Step]) -> ActionDefinition[Arguments]:
        if actor:
            check_template_text(actor, f"@action on {name or function.__name__}")
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
