"""The package's layering, enforced by reading every module's imports with ``ast``.

spec imports nothing of the project outside spec and no z3/torch/hypothesis/rich/numpy; traces
imports only itself, the standard library and msgspec (its decoder); impl imports only traces, impl, models and the
vocabulary (lockstep.spec.vocabulary); models
import only spec; only checkers/symbolic imports z3; only impl imports torch at module level.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "lockstep"
STANDARD_LIBRARY = frozenset(sys.stdlib_module_names) | {"__future__"}


@dataclass(frozen=True)
class Import:
    file: str  # relative to the repository root, e.g. lockstep/spec/terms.py
    line: int
    target: str  # absolute dotted name; for ``from m import n``: "m.n"
    top_level: bool  # at module level (not inside a function)

    @property
    def root(self) -> str:
        return self.target.split(".")[0]

    def within(self, *packages: str) -> bool:
        return any(self.target == package or self.target.startswith(package + ".") for package in packages)


def module_name(file: Path) -> str:
    parts = list(file.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_in(file: Path, source: str | None = None) -> Iterator[Import]:
    text = file.read_text(encoding="utf-8") if source is None else source
    tree = ast.parse(text, filename=str(file))
    relative = str(file.relative_to(ROOT))
    package = module_name(file) if file.name == "__init__.py" else module_name(file).rpartition(".")[0]

    def visit(node: ast.AST, top_level: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield Import(relative, child.lineno, alias.name, top_level)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in child.names:
                    yield Import(
                        relative, child.lineno, f"{base}.{alias.name}" if alias.name != "*" else base, top_level
                    )
            nested = top_level and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from visit(child, nested)

    yield from visit(tree, True)


Rule = Callable[[Import], str | None]


def in_folder(item: Import, folder: str) -> bool:
    return item.file.startswith(f"lockstep/{folder}/") or item.file == f"lockstep/{folder}.py"


def spec_is_pure(item: Import) -> str | None:
    if not in_folder(item, "spec"):
        return None
    if item.root == "lockstep" and not item.within("lockstep.spec"):
        return f"imports {item.target}: spec imports nothing of the project outside lockstep.spec"
    if item.root in {"z3", "torch", "hypothesis", "rich", "numpy"}:
        return f"imports {item.target}: spec is pure Python (no z3, torch, hypothesis, rich or numpy)"
    return None


def traces_use_the_standard_library(item: Import) -> str | None:
    if not in_folder(item, "traces"):
        return None
    if item.root == "lockstep" and not item.within("lockstep.traces"):
        return f"imports {item.target}: traces imports nothing of the project outside lockstep.traces"
    if item.root != "lockstep" and item.root not in STANDARD_LIBRARY and item.root != "msgspec":
        return f"imports {item.target}: traces imports only the standard library and msgspec"
    return None


def impl_imports_traces_only(item: Import) -> str | None:
    if (
        in_folder(item, "impl")
        and item.root == "lockstep"
        and not item.within(
            "lockstep.traces", "lockstep.impl", "lockstep.models", "lockstep.spec.vocabulary", "lockstep.lifetime"
        )
    ):
        allowed = (
            "lockstep.traces, lockstep.impl, lockstep.models, lockstep.spec.vocabulary (the model's names) "
            "and lockstep.lifetime"
        )
        return f"imports {item.target}: impl imports only {allowed}"
    return None


def models_import_spec_only(item: Import) -> str | None:
    if not in_folder(item, "models"):
        return None
    if item.root == "lockstep" and not item.within("lockstep.spec", "lockstep.models"):
        return f"imports {item.target}: models import only lockstep.spec"
    if item.root != "lockstep" and item.root not in STANDARD_LIBRARY:
        return f"imports {item.target}: models import only lockstep.spec and the standard library"
    return None


def z3_only_in_symbolic(item: Import) -> str | None:
    if item.root == "z3" and not in_folder(item, "checkers/symbolic"):
        return f"imports {item.target}: only lockstep/checkers/symbolic imports z3"
    return None


def torch_only_in_impl(item: Import) -> str | None:
    if item.root == "torch" and item.top_level and not in_folder(item, "impl"):
        return f"imports {item.target} at module level: only lockstep/impl imports torch eagerly (import it lazily)"
    return None


RULES: tuple[Rule, ...] = (
    spec_is_pure,
    traces_use_the_standard_library,
    impl_imports_traces_only,
    models_import_spec_only,
    z3_only_in_symbolic,
    torch_only_in_impl,
)


def violations(items: list[Import]) -> list[str]:
    found = []
    for item in items:
        for rule in RULES:
            problem = rule(item)
            if problem is not None:
                found.append(f"{item.file}:{item.line} {problem}")
    return found


def all_imports() -> list[Import]:
    return [item for file in sorted(PACKAGE.rglob("*.py")) for item in imports_in(file)]


def test_the_package_respects_its_layers() -> None:
    found = violations(all_imports())
    assert not found, "layering violations:\n  " + "\n  ".join(found)


def test_every_layer_was_read() -> None:
    files = {item.file for item in all_imports()}
    for folder in ("spec", "traces", "models", "checkers"):
        assert any(file.startswith(f"lockstep/{folder}/") for file in files), f"no imports read under lockstep/{folder}"
    assert "lockstep/spec/terms.py" in files


def fake(relative: str, source: str) -> list[Import]:
    return list(imports_in(ROOT / relative, source))


@pytest.mark.parametrize(
    ("relative", "source", "expected"),
    [
        (
            "lockstep/spec/fake.py",
            "import z3\nfrom lockstep.checkers import check\n",
            [
                "lockstep/spec/fake.py:1 imports z3: spec is pure Python",
                "lockstep/spec/fake.py:1 imports z3: only lockstep/checkers/symbolic",
                "lockstep/spec/fake.py:2 imports lockstep.checkers.check: spec imports nothing of the project outside "
                "lockstep.spec",
            ],
        ),
        (
            "lockstep/spec/fake.py",
            "def f():\n    import numpy\n",
            ["lockstep/spec/fake.py:2 imports numpy: spec is pure Python"],
        ),
        (
            "lockstep/spec/fake.py",
            "from ..models import dp_pause\nfrom . import sorts\n",
            ["lockstep/spec/fake.py:1 imports lockstep.models.dp_pause: spec imports nothing"],
        ),
        (
            "lockstep/traces/fake.py",
            "import numpy\nfrom lockstep.spec import sorts\nimport json\n",
            [
                "lockstep/traces/fake.py:1 imports numpy: traces imports only the standard library and msgspec",
                "lockstep/traces/fake.py:2 imports lockstep.spec.sorts: traces imports nothing",
            ],
        ),
        (
            "lockstep/impl/fake.py",
            "import torch\nfrom lockstep.checkers import check\nfrom lockstep.models import dp_pause\n",
            ["lockstep/impl/fake.py:2 imports lockstep.checkers.check: impl imports only"],
        ),
        (
            "lockstep/models/fake.py",
            "from lockstep.checkers import check\nimport rich\n",
            [
                "lockstep/models/fake.py:1 imports lockstep.checkers.check: models import only lockstep.spec",
                "lockstep/models/fake.py:2 imports rich: models import only",
            ],
        ),
        (
            "lockstep/checkers/fake.py",
            "import torch\ndef search():\n    import torch\n",
            ["lockstep/checkers/fake.py:1 imports torch at module level"],
        ),
        ("lockstep/checkers/symbolic/fake.py", "import z3\n", []),
        ("lockstep/cli/check.py", "import rich\nfrom lockstep.checkers import check\n", []),
    ],
)
def test_the_rules_catch_each_kind_of_violation(relative: str, source: str, expected: list[str]) -> None:
    found = violations(fake(relative, source))
    assert len(found) == len(expected), found
    for message, prefix in zip(found, expected):
        assert message.startswith(prefix), (message, prefix)
