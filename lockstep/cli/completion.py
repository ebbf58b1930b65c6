"""Shell completion of the ``lockstep`` command (bash, zsh, fish) through click's protocol.

``lockstep completion bash`` (or ``zsh``, ``fish``) prints the script a shell sources once; on
every TAB that script runs ``lockstep`` with ``_LOCKSTEP_COMPLETE`` set (``bash_complete``,
``zsh_complete``, ``fish_complete``) and the words typed so far, and click answers with the
candidates: command names, option names, choices, file names, and the functions here, which name
protocols (``check <TAB>``), the named protocol's variants (``--variant <TAB>``), instances
(``--instance <TAB>``), parameters (``--set <TAB>``), properties (``--property <TAB>``), engines
(``--engine <TAB>``) and kernels (``--kernels <TAB>``), and
the runtime's protocols, variants and scenarios for ``run``. A name the model cannot resolve
gives no candidates, never an error; model files are never imported on a TAB.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import click
from click.shell_completion import CompletionItem, get_completion_class, shell_complete

from lockstep.traces.output import write_stdout

if TYPE_CHECKING:
    from lockstep.spec.protocol import Protocol

PROGRAM = "lockstep"
VARIABLE = "_LOCKSTEP_COMPLETE"  # click's name for the program: _{PROGRAM}_COMPLETE
SHELLS = ("bash", "zsh", "fish")


def _matching(names: Iterable[tuple[str, str | None]], incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(name, help=help) for name, help in names if name.startswith(incomplete)]


def _protocol_name(ctx: click.Context) -> str | None:
    """The protocol the words typed so far name. Completing an option's value, click parses the words
    before it without that value, which stops the parse there: positional words not yet assigned
    are then left in ``ctx.args``."""
    named = ctx.params.get("protocol")
    if named:
        return str(named)
    return next((word for word in ctx.args if not word.startswith("-")), None)


def _named_protocol(ctx: click.Context) -> Protocol | None:
    """The built-in protocol the words typed so far name (None: none named, or not a known one)."""
    name = _protocol_name(ctx)
    if name is None:
        return None
    from lockstep.models import PROTOCOLS

    return PROTOCOLS.get(name)


def _protocols(ctx: click.Context) -> list[Protocol]:
    named = _named_protocol(ctx)
    if named is not None:
        return [named]
    from lockstep.models import PROTOCOLS

    return list(PROTOCOLS.values())


def protocols(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The built-in protocols' names."""
    from lockstep.models import PROTOCOLS

    return _matching(((name, protocol.title) for name, protocol in PROTOCOLS.items()), incomplete)


def variants(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The named protocol's variants (every protocol's, before one is named)."""
    seen: dict[str, str] = {}
    for protocol in _protocols(ctx):
        for variant in protocol.variants:
            seen.setdefault(variant.name, f"{variant.release}: {variant.description}")
    return _matching(seen.items(), incomplete)


def instances(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The named protocol's instances."""
    seen: dict[str, str] = {}
    for protocol in _protocols(ctx):
        for instance in protocol.instances:
            seen.setdefault(instance.name, instance.description)
    return _matching(seen.items(), incomplete)


def assignments(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """``NAME=`` for the named protocol's parameters (``--set``)."""
    seen: dict[str, str] = {}
    for protocol in _protocols(ctx):
        for parameter in protocol.parameters:
            seen.setdefault(f"{parameter.name}=", parameter.description)
    return [CompletionItem(name, help=help) for name, help in seen.items() if name.startswith(incomplete)]


def properties(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The properties of the named protocol's instance (``--property``)."""
    protocol = _named_protocol(ctx)
    if protocol is None:
        return []
    try:
        machine = protocol.instance(ctx.params.get("variant"), ctx.params.get("instance")).machine()
    except Exception:  # a name that does not resolve: no candidates, never a traceback on a TAB
        return []
    return _matching(((item.name, item.description) for item in machine.properties), incomplete)


def engines(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The engines' names (``--engine``), from the engines' registry."""
    from lockstep.checkers.engines import ENGINES

    return _matching(((name, None) for name in ENGINES), incomplete)


def kernels(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The vectorised engines' kernel choices (``--kernels``)."""
    from lockstep.checkers.engines import KERNELS

    return _matching(((name, None) for name in KERNELS), incomplete)


def _runtime(ctx: click.Context) -> list[Any]:
    from lockstep.impl.protocols import RUNTIME_PROTOCOLS

    named = RUNTIME_PROTOCOLS.get(str(_protocol_name(ctx)))
    return [named] if named is not None else list(RUNTIME_PROTOCOLS.values())


def runtime_protocols(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The protocols the torch reference runtime runs."""
    from lockstep.impl.protocols import RUNTIME_PROTOCOLS

    return _matching(((name, None) for name in RUNTIME_PROTOCOLS), incomplete)


def runtime_variants(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    names = dict.fromkeys(variant for protocol in _runtime(ctx) for variant in protocol.variants)
    return _matching(((name, None) for name in names), incomplete)


def runtime_scenarios(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    names = dict.fromkeys(scenario for protocol in _runtime(ctx) for scenario in protocol.scenarios)
    return _matching(((name, None) for name in names), incomplete)


def runtime_settings(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    seen = {f"{name}=": setting.help for protocol in _runtime(ctx) for name, setting in protocol.settings.items()}
    return [CompletionItem(name, help=help) for name, help in seen.items() if name.startswith(incomplete)]


def script(command: click.Command, shell: str) -> str:
    """The completion script ``shell`` sources (``lockstep completion SHELL``)."""
    kind = get_completion_class(shell)
    if kind is None:  # click.Choice keeps this from happening
        raise click.BadParameter(f"no completion for {shell!r}; shells: {', '.join(SHELLS)}")
    return kind(command, {}, PROGRAM, VARIABLE).source()


def answer(command: click.Command) -> int | None:
    """Answer a shell's completion request (``_LOCKSTEP_COMPLETE`` set): the exit status; None when
    this is not one."""
    instruction = os.environ.get(VARIABLE)
    if not instruction:
        return None
    return shell_complete(command, {}, PROGRAM, VARIABLE, instruction)


def print_script(arguments: Any, console: Any) -> int:
    """``lockstep completion SHELL``: the script on stdout."""
    from lockstep.cli.root import lockstep

    write_stdout(script(lockstep, arguments.shell))
    return 0
