"""The reporter: renders a ``CheckResult`` for people (rich, on stderr) and for programs (JSON).

Engines return values; this module and the CLI are the only places that turn them into text.
The counterexample is shown as per-actor swimlanes: step, what each actor did
(``action(arguments)``), the source function(s) the action mirrors (when the model names them,
e.g. ``DPEngineCoreProc.add_request``), the variables that changed (old -> new), and which
collective each rank blocks in after the step, with its per-communicator sequence number. The JSON
form lists the same steps (actor, action, arguments, mirrors) and, when asked (``states=True``:
``check --json-states``), the counterexample's states: ``initial_state`` and each step's ``state``,
every variable but the monitors' by name, in the trace format's JSON (enum members by name).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path as FilePath
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from lockstep.checkers.counterexample import blocked_summary, rows
from lockstep.checkers.result import CheckResult, Path, PropertyResult, Verdict, never_enabled_warning
from lockstep.spec.definitions import NO_DEADLOCK
from lockstep.spec.machine import Machine, PropertyKind
from lockstep.spec.protocol import Instance
from lockstep.spec.semantics import State

VERDICT_STYLES = {
    Verdict.HOLDS: "green",
    Verdict.HOLDS_WITHIN_BOUND: "green",
    Verdict.VIOLATED: "bold red",
    Verdict.INCONCLUSIVE: "yellow",
}
MAX_CHANGE_WIDTH = 70


def verdict_text(verdict: Verdict | str) -> Text:
    value = Verdict(verdict) if isinstance(verdict, str) else verdict
    return Text(value.value, style=VERDICT_STYLES[value])


def properties_table(result: CheckResult) -> Table:
    table = Table(title="properties", title_justify="left", expand=False)
    table.add_column("property")
    table.add_column("kind")
    table.add_column("verdict")
    table.add_column("length", justify="right")
    table.add_column("detail")
    for item in result.properties:
        kind = "built-in" if item.builtin else item.kind.value
        length = "" if item.path is None else str(item.path.length)
        table.add_row(item.name, kind, verdict_text(item.verdict), length, property_detail(result, item))
    return table


def property_detail(result: CheckResult, item: PropertyResult) -> str:
    """The sentence saying what the check established about one property: the engine's own detail
    where it gave one, else one built from the verdict, the path and the search's statistics."""
    if item.detail:
        return item.detail
    stats = result.stats
    searched = None if stats.states is None else f"exhaustive search: {stats.states:,} distinct states"
    if item.verdict is Verdict.HOLDS:
        if item.kind is PropertyKind.SOMETIMES and item.path is not None:
            return f"a state where it holds is reached in {_steps(item.path.length)}"
        if item.kind is PropertyKind.LEADS_TO and searched is not None:
            return f"every trigger is followed by the response on every fair run ({searched})"
        if item.builtin and item.name == NO_DEADLOCK and searched is not None:
            return f"no reachable state is a deadlock ({searched})"
        if searched is not None:
            return f"holds in every reachable state ({searched})"
        return f"holds ({result.engine})"
    if item.verdict is Verdict.VIOLATED and item.path is not None:
        if item.kind is PropertyKind.ALWAYS:
            return f"violated by a state reached in {_steps(item.path.length)}"
        return f"violated: the path shown has {_steps(item.path.length)}"
    if item.verdict is Verdict.HOLDS_WITHIN_BOUND:
        return f"no violation within {_steps(stats.depth)}"
    if item.verdict is Verdict.INCONCLUSIVE:
        where = "" if stats.states is None else f" after {stats.states:,} states"
        return f"not settled: the check stopped ({result.stopped or 'before a verdict'}){where}"
    return f"{item.verdict.value} ({result.engine})"


def _steps(count: int) -> str:
    return f"{count:,} step" + ("" if count == 1 else "s")


def _shorten(text: str) -> str:
    return text if len(text) <= MAX_CHANGE_WIDTH else text[: MAX_CHANGE_WIDTH - 1] + "…"


def swimlanes(machine: Machine, path: Path, title: str) -> Table:
    """One row per step; one column per rank, one for the other actors (client, coordinator, groups)."""
    steps = rows(machine, path)
    ranks = sorted({int(row.actor.split(":")[1]) for row in steps if row.actor.startswith("rank:")})
    members = sorted({member for row in steps for member in row.waiting})
    lanes = sorted(set(ranks) | set(members))
    table = Table(title=title, title_justify="left", show_lines=False)
    table.add_column("#", justify="right")
    for lane in lanes:
        table.add_column(f"rank {lane}")
    table.add_column("client / coordinator / groups")
    mirrored = any(row.mirrors for row in steps)
    if mirrored:
        table.add_column("mirrors (source)", style="cyan", overflow="fold")
    table.add_column("changed (old → new)")
    for row in steps:
        label = f"{row.action}({row.arguments})" if row.arguments else row.action
        cells: list[Text | str] = []
        for lane in lanes:
            mine = row.actor == f"rank:{lane}"
            waiting = " ".join(row.waiting.get(lane, ()))
            cell = Text(label, style="bold") if mine else Text("")
            if waiting:
                cell.append(("\n" if mine else "") + f"⏳ {waiting}", style="magenta")
            cells.append(cell)
        other = "" if row.actor.startswith("rank:") else f"{row.actor}: {label}"
        changed = "\n".join(_shorten(f"{change.variable}: {change.before} → {change.after}") for change in row.changes)
        number = str(row.index)
        if path.loop_start is not None and row.index == path.loop_start + 1:
            number = f"↻ {number}"  # a lasso: the cycle starts here
        table.add_row(number, *cells, other, *([row.mirrors] if mirrored else []), changed)
    if path.loop_start is not None:
        table.caption = (
            "the run stops here, the response still pending"
            if path.loop_start == path.length
            else f"↻ steps {path.loop_start + 1}–{path.length} repeat forever (a fair cycle)"
        )
    return table


def state_table(machine: Machine, state: tuple[object, ...], title: str) -> Table:
    """Every (non-monitor) variable of a state and its value."""
    table = Table(title=title, title_justify="left")
    table.add_column("variable")
    table.add_column("value")
    for (name, variable), value in zip(machine.variables.items(), state, strict=True):
        if not variable.monitor:
            table.add_row(name, _shorten(variable.sort.render(value)))
    return table


def render(
    console: Console,
    result: CheckResult,
    *,
    label: str,
    expected: str | None,
    trace_file: FilePath | None,
    instance: Instance | None = None,
) -> None:
    """The human report of one check (``instance``: the built-in one it checked, which tells an
    action its parameters turn off from one never enabled for another reason)."""
    stats = result.stats
    if stats.walks is not None:  # a swarm: walks and steps, the distinct states an estimate
        steps = stats.transitions or 0
        summary = (
            f"  ({result.engine}: {stats.walks:,} walks, {steps:,} steps, ~{stats.distinct_estimate or 0:,} distinct "
            f"states (HyperLogLog estimate), depth {stats.depth}, {stats.seconds:.2f} s, "
            f"{steps / stats.seconds if stats.seconds > 0 else 0:,.0f} steps/s)"
        )
    elif stats.states is None or stats.transitions is None:
        summary = f"  ({result.engine}: depth {stats.depth}, {stats.seconds:.2f} s)"
    else:
        summary = (
            f"  ({result.engine}: {stats.states:,} states, {stats.transitions:,} transitions, depth {stats.depth}, "
            f"{stats.seconds:.2f} s, {stats.states_per_second:,.0f} states/s)"
        )
    console.print(Text.assemble((label, "bold"), "  ", verdict_text(result.verdict), summary))
    if result.stopped is not None:
        console.print(f"[yellow]stopped early: {result.stopped}; the result is partial[/yellow]")
    console.print(properties_table(result))
    warnings, notes = warnings_and_notes(result, instance)
    for warning in warnings:
        console.print(Text.assemble(("warning:", "yellow"), f" {warning}"))
    for note in notes:
        console.print(Text(f"note: {note}"))
    shortest = result.counterexample
    if shortest is not None and shortest.path is not None:
        console.print(
            swimlanes(result.machine, shortest.path, f"counterexample: {shortest.name} ({shortest.path.length} steps)")
        )
        blocked = blocked_summary(result.machine, shortest.path)
        description = described(result.machine, shortest.name)
        if description:
            console.print(Text.assemble((shortest.name, "red"), f" is violated: {description}"))
        if shortest.detail:
            console.print(f"[red]{shortest.name}[/red]: {shortest.detail}")
        if blocked:
            console.print(f"at the end: {blocked}")
        for other in result.properties:
            if other is not shortest and other.verdict is Verdict.VIOLATED and other.path is not None:
                extra = blocked_summary(result.machine, other.path)
                sentence = described(result.machine, other.name)
                console.print(
                    f"also violated: {other.name} after {other.path.length} steps"
                    + (f" ({extra})" if extra else "")
                    + (f": {sentence}" if sentence else "")
                )
    for other in result.properties:  # k-induction: a failed step, shown as its states and actions
        if other.verdict is Verdict.INCONCLUSIVE and other.path is not None:
            console.print(
                state_table(result.machine, other.path.initial, f"{other.name}: the failed induction step starts in")
            )
            title = f"{other.name}: {other.detail} ({other.path.length + 1} states)"
            console.print(swimlanes(result.machine, other.path, title))
    if trace_file is not None:
        console.print(f"trace: {trace_file}")
    if expected is not None:
        console.print(_pinned_text(expected, result.verdict))


def _pinned_text(expected: str, verdict: Verdict) -> Text:
    """How a check's verdict stands to its instance's pinned one: as pinned, unsettled (an
    inconclusive check contradicts nothing), or differing."""
    if verdict is Verdict.INCONCLUSIVE:
        return Text(f"expected {expected}: not settled by this check (inconclusive)", style="yellow")
    if expected == verdict.value:
        return Text(f"expected {expected}: as pinned", style="green")
    return Text(f"expected {expected}: DIFFERS from the pinned verdict", style="bold red")


def warnings_and_notes(result: CheckResult, instance: Instance | None) -> tuple[list[str], list[str]]:
    """The warnings to show, and the notes. An action of a built-in protocol that no explored state
    enabled is turned off by the instance's parameters or variant (every action of a built-in
    protocol is enabled in some pinned instance: tests/test_idle_actions.py), so it is a note; one
    that a model file or an overlay binds stays a warning: it may never be enabled at all. Only a
    search that covered every state (verdict holds) says the instance turns it off."""
    from lockstep.models import PROTOCOLS

    if instance is None or instance.protocol.name not in PROTOCOLS:
        return list(result.warnings), []
    expected = [
        name for name in result.never_enabled if not result.machine.action_named(name).mirrors.startswith("overlay ")
    ]
    hidden = {never_enabled_warning(name) for name in expected}
    warnings = [warning for warning in result.warnings if warning not in hidden]
    if not expected:
        return warnings, []
    names = ", ".join(expected)
    if result.verdict is not Verdict.HOLDS:  # a search that stopped or was bounded saw only part of the space
        return warnings, [f"not enabled in the states explored (the search did not cover them all): {names}"]
    return warnings, [f"not enabled in this instance (its parameters or variant turn it off): {names}"]


def described(machine: Machine, name: str) -> str:
    """The sentence a property was declared with ("" for none)."""
    try:
        return machine.property_named(name).description
    except KeyError:
        return ""


def property_json(item: PropertyResult, description: str = "", detail: str = "") -> dict[str, Any]:
    """One property's entry in ``check --json``; ``detail``: what the check established
    (``property_detail``), the engine's own detail where empty."""
    counterexample = item.counterexample
    witness = item.path if item.kind is PropertyKind.SOMETIMES and item.verdict is Verdict.HOLDS else None
    return {
        "name": item.name,
        "description": description,
        "kind": item.kind.value,
        "verdict": item.verdict.value,
        "detail": detail or item.detail,
        "counterexample": None
        if counterexample is None
        else {"length": counterexample.length, "detail": item.detail, "loop_start": counterexample.loop_start},
        "witness": None if witness is None else {"length": witness.length},
        # pdr: the re-checked inductive invariant that proves the property, in the model's variables
        "invariant": item.invariant,
        "invariant_summary": list(item.invariant_summary),
        # k-induction: the step that failed (its states need not be reachable)
        "failed_step": {"length": item.path.length}
        if item.verdict is Verdict.INCONCLUSIVE and item.path is not None
        else None,
    }


def result_json(
    result: CheckResult, instance: Instance, trace_file: FilePath | None, *, states: bool = False
) -> dict[str, Any]:
    """``check --json``'s object (``lockstep/schemas/check.schema.json``); with ``states`` the
    counterexample carries its states (see the module doc)."""
    shortest = result.counterexample
    warnings, notes = warnings_and_notes(result, instance)
    counterexample: dict[str, Any] | None = None
    if shortest is not None and shortest.path is not None:
        counterexample = {
            "property": shortest.name,
            "description": described(result.machine, shortest.name),
            "length": shortest.path.length,
            "loop_start": shortest.path.loop_start,
            "trace_file": None if trace_file is None else str(trace_file),
            "steps": steps_json(result.machine, shortest.path, states=states),
        }
        if states:
            counterexample["initial_state"] = state_json(result.machine, shortest.path.initial)
    return {
        "schema_version": SCHEMA_VERSION,
        "versions": tool_versions(),
        "protocol": instance.protocol.name,
        "variant": instance.variant,
        "instance": instance.name,
        "parameters": dict(instance.parameters),
        "engine": result.engine,
        "verdict": result.verdict.value,
        "expected": instance.expected,
        "properties": [
            property_json(item, described(result.machine, item.name), property_detail(result, item))
            for item in result.properties
        ],
        "stats": {
            "states": result.stats.states,
            "transitions": result.stats.transitions,
            "depth": result.stats.depth,
            "seconds": round(result.stats.seconds, 3),
            **({} if result.stats.walks is None else {"walks": result.stats.walks}),
            **({} if result.stats.distinct_estimate is None else {"distinct_estimate": result.stats.distinct_estimate}),
            "phases": {name: round(seconds, 4) for name, seconds in result.stats.phases.items()},
            **({} if result.stats.peak_memory_bytes is None else {"peak_memory_bytes": result.stats.peak_memory_bytes}),
        },
        "stopped": result.stopped,
        "warnings": warnings,
        "notes": notes,
        "counterexample": counterexample,
    }


def state_json(machine: Machine, state: State) -> dict[str, Any]:
    """A state for programs: every variable but the monitors', by name, in the trace format's JSON."""
    return {
        name: variable.sort.to_json(value)
        for (name, variable), value in zip(machine.variables.items(), state)
        if not variable.monitor
    }


def steps_json(machine: Machine, path: Path, *, states: bool = False) -> list[dict[str, Any]]:
    """A counterexample's steps for programs: index, actor, action, arguments (an object of JSON
    values, enum members by name), mirrored functions; with ``states`` the state after each step."""
    result: list[dict[str, Any]] = []
    for row, step in zip(rows(machine, path), path.steps, strict=True):
        action = machine.action_named(step.action)
        arguments = {
            parameter.name: parameter.sort.to_json(step.arguments[parameter.name]) for parameter in action.parameters
        }
        result.append(
            {
                "index": row.index,
                "actor": row.actor,
                "action": row.action,
                "arguments": arguments,
                "mirrors": row.mirrors,
                **({"state": state_json(machine, step.state)} if states else {}),
            }
        )
    return result


SCHEMA_VERSION = 2  # of check's --json object: 2 added the versions, descriptions and argument objects


def tool_versions() -> dict[str, str | None]:
    """The versions of lockstep and of what it runs on (None: not installed), without importing them."""
    import platform
    from importlib import metadata

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {
        "lockstep": version("lockstep"),
        "python": platform.python_version(),
        "numpy": version("numpy"),
        "z3-solver": version("z3-solver"),
        "torch": version("torch"),
    }


@dataclass(frozen=True)
class PinnedRow:
    """One line of ``check --all``: an instance × variant, its pin, its verdict and the evidence."""

    protocol: str
    variant: str
    release: str
    instance: str
    expected: str | None
    verdict: str
    detail: str
    finding: str  # the vLLM functions involved, for a finding instance's released variant
    scenario: str
    finding_detail: str = ""  # the finding's own counterexample(s) in this variant ("" where it shows none)
    upstream: str = ""  # what vLLM's issues and PRs say of the finding (``InstanceSpec.upstream``)

    @classmethod
    def of(cls, instance: Instance, result: CheckResult) -> PinnedRow:
        shortest = result.counterexample
        unwitnessed = [
            item.name for item in result.properties if item.verdict is Verdict.VIOLATED and item.path is None
        ]
        if shortest is not None and shortest.path is not None:
            detail = f"`{shortest.name}` in {shortest.path.length} steps"
        elif unwitnessed and result.stats.states is not None:
            detail = f"`{unwitnessed[0]}`: no witness in {result.stats.states:,} states"
        elif result.stats.states is not None:
            detail = f"{result.stats.states:,} states"
        else:
            detail = f"no violation within depth {result.stats.depth}"
        spec = instance.protocol.instance_spec(instance.name)
        variant = instance.protocol.variant(instance.variant)
        released = instance.variant == instance.protocol.default_variant or variant.later_release
        finding_detail = detail if result.verdict is Verdict.VIOLATED else ""
        if spec.finding_properties:
            shown = [
                f"`{item.name}` in {item.path.length}"
                for item in result.properties
                if item.name in spec.finding_properties and item.verdict is Verdict.VIOLATED and item.path is not None
            ]
            finding_detail = f"{', '.join(shown)} steps" if shown else ""
        return cls(
            instance.protocol.name,
            instance.variant,
            variant.release,
            instance.name,
            instance.expected,
            result.verdict.value,
            detail,
            spec.finding if released and finding_detail else "",
            spec.description,
            finding_detail,
            spec.upstream,
        )

    @property
    def as_pinned(self) -> bool:
        return self.expected == self.verdict


def summary_table(rows_: Sequence[PinnedRow]) -> Table:
    """The ``check --all`` table: protocol, variant, instance, expected, verdict, detail."""
    table = Table(title="lockstep check --all", title_justify="left")
    for column in ("protocol", "variant", "instance", "expected", "verdict", "counterexample / states"):
        table.add_column(column)
    for row in rows_:
        style = "green" if row.as_pinned else "bold red"
        table.add_row(
            row.protocol,
            row.variant,
            row.instance,
            row.expected or "-",
            Text(row.verdict, style=style),
            row.detail.replace("`", ""),
        )
    return table


def markdown_tables(rows_: Sequence[PinnedRow]) -> str:
    """The README's generated tables: protocols × variants × verdicts, then the findings."""
    lines = [
        "| protocol | variant (stands for) | instance | pinned | verdict | counterexample / states |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows_:
        lines.append(
            f"| `{row.protocol}` | `{row.variant}` ({row.release}) | `{row.instance}` | {row.expected} | "
            f"{row.verdict} | {row.detail} |"
        )
    lines += [
        "",
        "Findings (violations of a released variant, post-fix or a later release, that vLLM's source confirms; "
        "one line per instance):",
        "",
    ]
    lines += [
        "| scenario (instance) | counterexample | vLLM functions involved | upstream |",
        "|---|---|---|---|",
    ]
    findings: dict[tuple[str, str], list[PinnedRow]] = {}  # one line per finding, its released variants in order
    for row in rows_:
        if row.finding:
            findings.setdefault((row.protocol, row.instance), []).append(row)
    for group in findings.values():
        first = group[0]
        shown = "; ".join(f"{row.finding_detail} ({row.variant}, {row.release})" for row in group)
        lines.append(
            f"| `{first.protocol} {first.instance}`: {first.scenario} | {shown} | {first.finding} | "
            f"{first.upstream or 'not searched'} |"
        )
    if not findings:
        lines.append("| none | | | |")
    return "\n".join(lines) + "\n"
