"""What a change to vLLM touches in the models: from a unified diff (or a vLLM tree) to actions and checks.

A model's actions name the vLLM functions they stand for (``mirrors=``, e.g. ``_handle_client_request(UTILITY)
→ EngineCoreProc.pause_scheduler → DPEngineCoreProc._pause_complete``). ``changed_functions`` reads a
unified diff and returns every Python function or method whose lines it changes (qualified by class
where the post-change source is at hand, else from the hunk's own ``def`` lines and header);
``touched_actions`` matches them against every variant's mirrored names: a dotted name matches a
method of that class or of a class it inherits from or that inherits from it (read from the source
tree), and a bare name matches any function of that name. ``not_modelled`` lists the changed
functions no action mirrors but that a mirrored function calls (by name), with file and line, when
a source tree is given. ``plan`` puts it together per protocol, with the checks to run: the pinned
instances of the variant that models the base release (``Protocol.release_variant``).

The matching is by name and is meant to over-approximate: a changed function that shares a name with
a mirrored one is listed, and the user reads the action's mirrors to decide.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lockstep.spec.protocol import Protocol, UsageError

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$")
_DEFINITION = re.compile(r"^(\s*)(?:async\s+)?def\s+([A-Za-z_]\w*)|^(\s*)class\s+([A-Za-z_]\w*)")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


class ChangeError(UsageError):
    """A diff or tree that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class ChangedFunction:
    """A function or method whose lines a diff changes: its file (as the diff names it), its
    qualified name (``Class.method`` where the class is known) and a changed line (post-change)."""

    path: str
    name: str
    line: int

    @property
    def short(self) -> str:
        return self.name.rpartition(".")[2]

    @property
    def owner(self) -> str | None:
        return self.name.rpartition(".")[0] or None


@dataclass(frozen=True)
class Touched:
    """An action of a variant whose mirrored function the change touches."""

    protocol: str
    variant: str
    action: str
    mirrors: str
    function: ChangedFunction
    mirrored: str  # the name in ``mirrors`` that matched


@dataclass(frozen=True)
class NotModelled:
    """A changed function no action mirrors, called by a mirrored function (``caller``, at its file and line)."""

    function: ChangedFunction
    caller: str
    caller_path: str
    caller_line: int


@dataclass
class ProtocolPlan:
    """One protocol's part of a change: its touched actions and the checks to run."""

    protocol: str
    variant: str | None  # the variant of the base release; None: the release is not modelled
    touched: list[Touched] = field(default_factory=list)
    checks: list[tuple[str, str, str | None]] = field(default_factory=list)  # (variant, instance, pinned verdict)
    note: str = ""


@dataclass
class ChangePlan:
    """What a change touches: the functions, the protocols, what no action mirrors."""

    release: str
    functions: list[ChangedFunction]
    protocols: list[ProtocolPlan]
    not_modelled: list[NotModelled]
    unmatched: list[ChangedFunction]  # changed, mirrored by no action, called by no mirrored function


# ---- reading a diff -------------------------------------------------------------------------------


def _spans(source: str, path: str) -> list[tuple[int, int, str]]:
    """(first line, last line, qualified name) of every function in ``source``, innermost last."""
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as error:
        line = getattr(error, "lineno", None)
        raise ChangeError(f"{path}:{line or 1}: not Python that parses ({error.__class__.__name__})") from None
    spans: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                spans.append((child.lineno, child.end_lineno or child.lineno, name))
                visit(child, f"{name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return spans


def _innermost(spans: Sequence[tuple[int, int, str]], line: int) -> str | None:
    holding = [span for span in spans if span[0] <= line <= span[1]]
    if not holding:
        return None
    name = max(holding, key=lambda span: span[0])[2]
    return name.split(".<locals>.")[0]  # a nested function stands for the function it is in


@dataclass
class _FileChange:
    path: str
    lines: list[int] = field(default_factory=list)  # post-change lines changed (a removal: the line after it)
    hunk_names: dict[int, str] = field(default_factory=dict)  # line -> the function the hunk shows around it


def _parse_diff(text: str, origin: str) -> list[_FileChange]:
    files: list[_FileChange] = []
    current: _FileChange | None = None
    new_line = 0
    context: list[tuple[int, str, int]] = []  # (line, name, indent) of ``def``/``class`` lines seen in the hunk
    header = ""
    hunk_start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.startswith("+++ "):
            target = raw[4:].split("\t")[0].strip()
            if target == "/dev/null":
                current = None
                continue
            target = target[2:] if target.startswith(("a/", "b/")) else target
            current = _FileChange(target) if target.endswith(".py") else None
            if current is not None:
                files.append(current)
            continue
        if raw.startswith("--- ") or raw.startswith("diff ") or raw.startswith("index "):
            continue
        hunk = _HUNK.match(raw)
        if hunk is not None:
            new_line = hunk_start = int(hunk[3])
            header = hunk[5]
            context = []
            continue
        if current is None or not raw or raw[0] not in " +-\\":
            if current is not None and raw and not raw.startswith(("new file", "deleted file", "similarity", "rename")):
                raise ChangeError(f"{origin}:{number}: not a line of a unified diff: {raw[:60]!r}")
            continue
        kind, body = raw[0], raw[1:]
        if kind == "\\":
            continue
        definition = _DEFINITION.match(body)
        if definition is not None and kind != "-":
            indent = len(definition[1] if definition[1] is not None else definition[3])
            context = [item for item in context if item[2] < indent]
            context.append((new_line, definition[2] or f"class {definition[4]}", indent))
        if kind in "+-":
            current.lines.append(new_line)
            names = [name for _, name, _ in context]
            if not names:
                found = _DEFINITION.search(header.strip()) if header else None
                if found is not None:
                    names = [found[2] or f"class {found[4]}"]
            if names and names[-1].startswith("class "):  # the hunk shows the class, not the function
                names.append(f"<the function around line {hunk_start}>")
            if names:
                current.hunk_names[new_line] = ".".join(name.removeprefix("class ") for name in names)
        if kind != "-":
            new_line += 1
    return files


def changed_functions(diff: str, origin: str = "<diff>", source: Path | None = None) -> list[ChangedFunction]:
    """The functions ``diff`` changes, in order of file and line (each once). With ``source`` (the
    post-change tree the diff's paths are relative to), names come from its ``ast``; else from the hunks."""
    found: dict[tuple[str, str], ChangedFunction] = {}
    for change in _parse_diff(diff, origin):
        spans = None
        if source is not None and (source / change.path).is_file():
            spans = _spans((source / change.path).read_text(encoding="utf-8", errors="replace"), change.path)
        for line in change.lines:
            name = _innermost(spans, line) if spans is not None else change.hunk_names.get(line)
            if name is not None:
                found.setdefault((change.path, name), ChangedFunction(change.path, name, line))
    return sorted(found.values(), key=lambda item: (item.path, item.line))


# ---- the models' side ---------------------------------------------------------------------------------


def mirrored_names(mirrors: str) -> list[str]:
    """The code names in a ``mirrors=`` text: dotted names, names with ``_``, and CamelCase classes."""
    names = []
    for name in _NAME.findall(mirrors):
        last = name.rpartition(".")[2]
        if "." in name or "_" in name or (last[:1].isupper() and any(ch.islower() for ch in last)):
            if not re.fullmatch(r"v?\d.*", name):
                names.append(name)
    return names


@dataclass(frozen=True)
class Classes:
    """Class name -> its base class names, read from a source tree (empty without one)."""

    bases: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def related(self, first: str, second: str) -> bool:
        """Whether one class is the other or inherits from it (by name, through the tree)."""
        return first == second or second in self._ancestors(first) or first in self._ancestors(second)

    def _ancestors(self, name: str) -> set[str]:
        seen: set[str] = set()
        todo = [name]
        while todo:
            for base in self.bases.get(todo.pop(), ()):
                if base not in seen:
                    seen.add(base)
                    todo.append(base)
        return seen


def _matches(mirrored: str, function: ChangedFunction, classes: Classes) -> bool:
    owner, _, name = mirrored.rpartition(".")
    if name != function.short:
        return False
    if not owner or function.owner is None:
        return True
    return classes.related(owner.rpartition(".")[2], function.owner.rpartition(".")[2])


def touched_actions(
    protocol: Protocol, variants: Iterable[str], functions: Sequence[ChangedFunction], classes: Classes
) -> list[Touched]:
    """Every action of ``variants`` (their default instance's machine) whose mirrors name a changed function."""
    touched = []
    for variant in variants:
        machine = protocol.instance(variant).machine()
        for action in machine.actions:
            for mirrored in mirrored_names(action.mirrors):
                for function in functions:
                    if _matches(mirrored, function, classes):
                        touched.append(Touched(protocol.name, variant, action.name, action.mirrors, function, mirrored))
    return touched


# ---- a vLLM tree -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tree:
    """What a vLLM source tree says about classes and calls, read from the files that matter."""

    classes: Classes
    callers: Mapping[str, list[tuple[str, str, int]]]  # called name -> (caller, file, line) of mirrored callers


def read_tree(root: Path, mirrored: Iterable[str]) -> Tree:
    """Read ``root``'s Python files (``vllm/`` below it if there is one): the class graph, and for
    every function whose name a model mirrors, the names it calls."""
    wanted = {name.rpartition(".")[2] for name in mirrored}
    package = root / "vllm" if (root / "vllm").is_dir() else root
    bases: dict[str, set[str]] = {}
    callers: dict[str, list[tuple[str, str, int]]] = {}
    for file in sorted(package.rglob("*.py")):
        text = file.read_text(encoding="utf-8", errors="replace")
        if "class " not in text and not any(name in text for name in wanted):
            continue
        try:
            tree = ast.parse(text, filename=str(file))
        except (SyntaxError, ValueError):
            continue  # a file of the tree that does not parse: it cannot be a caller we can read
        relative = str(file.relative_to(root))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                names = {
                    base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "") for base in node.bases
                }
                bases.setdefault(node.name, set()).update(name for name in names if name)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in wanted:
                        _record_calls(item, f"{node.name}.{item.name}", relative, callers)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in wanted:
                if node.col_offset == 0:
                    _record_calls(node, node.name, relative, callers)
    return Tree(Classes({name: frozenset(found) for name, found in bases.items()}), callers)


def _record_calls(
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    name: str,
    path: str,
    callers: dict[str, list[tuple[str, str, int]]],
) -> None:
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if called:
                callers.setdefault(called, []).append((name, path, function.lineno))


# ---- the plan -------------------------------------------------------------------------------------------


def plan(
    functions: Sequence[ChangedFunction],
    protocols: Sequence[Protocol],
    release: str,
    tree: Tree | None = None,
) -> ChangePlan:
    """Per protocol, the actions of the base release's variant that the change touches and its pinned checks."""
    classes = tree.classes if tree is not None else Classes()
    plans: list[ProtocolPlan] = []
    matched: set[ChangedFunction] = set()
    for protocol in protocols:
        variant = protocol.release_variant(release)
        if variant is None:
            newest = protocol.releases()[-1][2].name if protocol.releases() else protocol.default_variant
            plans.append(ProtocolPlan(protocol.name, None, note=f"vLLM {release} is not modelled; newest: {newest}"))
            variants = [newest]
        else:
            plans.append(ProtocolPlan(protocol.name, variant.name))
            variants = [variant.name]
        entry = plans[-1]
        entry.touched = touched_actions(protocol, variants, functions, classes)
        matched.update(item.function for item in entry.touched)
        entry.checks = [
            (name, spec.name, spec.expected.get(name))
            for name in variants
            for spec in protocol.instances
            if name in spec.expected
        ]
    rest = [function for function in functions if function not in matched]
    not_modelled = []
    unmatched = []
    for function in rest:
        calls = tree.callers.get(function.short, []) if tree is not None else []
        if calls:
            caller, path, line = calls[0]
            not_modelled.append(NotModelled(function, caller, path, line))
        else:
            unmatched.append(function)
    return ChangePlan(release, list(functions), plans, not_modelled, unmatched)


__all__ = [
    "ChangeError",
    "ChangePlan",
    "ChangedFunction",
    "Classes",
    "NotModelled",
    "ProtocolPlan",
    "Touched",
    "Tree",
    "changed_functions",
    "mirrored_names",
    "plan",
    "read_tree",
    "touched_actions",
]
