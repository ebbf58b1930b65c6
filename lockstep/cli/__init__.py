"""The ``lockstep`` command: ``lockstep.cli:main`` (the console script) and ``python -m lockstep``.

Built on **click** (not typer, not argparse). What click removes that was written by hand, or
would have to be:

- shell completion for bash, zsh and fish (its ``_LOCKSTEP_COMPLETE`` protocol and scripts); we
  only write the functions that name protocols, variants and instances (``completion``);
- no abbreviated options, by default (argparse needs ``allow_abbrev=False`` on every parser) and
  "Did you mean --max-states?" for a misspelt option;
- a lazily loaded group (``root.LazyGroup``): ``lockstep --help`` imports no command's module;
- exit 2 with a usage line for every parse error (argparse needed an ``error`` override).

Typer would add a dependency on top of click for type-annotated signatures; the commands here
take many options whose help and completion read better declared next to them, and typer's
rich-formatted errors would be a second error style. argparse stays only where the runtime's own
entry (``python -m lockstep.impl.rank`` under torchrun, which must not import the CLI) parses the
run's options; ``lockstep run`` turns that parser into a click command (``runtime``).

Modules: ``root`` (the command table, ``--version``, ``main``), ``commands`` (every command's
options but ``run``'s; imports only click), ``invocation`` (a parsed command line and running it),
``failures`` (usage errors, Ctrl-C, SIGTERM, exceptions; the JSON error object), ``numbers``
(finite positive numbers), ``completion``; the bodies: ``listing`` (list, prove-lemmas), ``check``,
``fuzz``, ``runtime`` (run), ``reproduce``, ``trace`` (replay, trace merge), ``export`` (show,
export, graph).

Exit codes (every command): 0 everything asked holds / conforms / is as pinned; 1 a property is
violated (or, for ``check --all``, a verdict differs from its pin); 2 usage or input error (a
message, never a traceback); 3 inconclusive (a limit or Ctrl-C stopped the search, or the
runtime gave no verdict); 4 a process of a runtime run crashed (died without finishing: not a
hang, not a verdict); 5 a model error (the model's own code raised while it ran) or an internal
error: one line naming the file and line (``failures``); 143 SIGTERM (the run's processes and
temporary files removed). A violation wins over a limit. Human output goes to stderr; with
``--json`` stdout carries exactly one JSON object, a result or an error object, each with a
``schema_version`` (the schemas: ``lockstep/schemas/``).
"""

from lockstep.cli.root import main

__all__ = ["main"]
