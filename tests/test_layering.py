"""The package's layering, enforced by reading every module's imports with ``ast``.

spec imports nothing of the project outside spec and no z3/torch/hypothesis/rich/numpy; traces
imports only itself, the standard library and msgspec (its decoder); impl imports only traces, impl, models and the
vocabulary (lockstep.spec.vocabulary); models
import only spec; checkers imports only spec, traces, itself and the package's leaf modules (clock,
cache, lifetime, loopback: each imports nothing of the project); no built-in protocol, variant or
property name appears under lockstep/checkers; only checkers/symbolic imports z3; only impl imports
torch at module level.
"""

from __future__ import annotations

import ast
import re
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
            "lockstep.traces",
            "lockstep.impl",
            "lockstep.models",
            "lockstep.spec.vocabulary",
            "lockstep.lifetime",
            "lockstep.loopback",
        )
    ):
        allowed = (
            "lockstep.traces, lockstep.impl, lockstep.models, lockstep.spec.vocabulary (the model's names) "
            "and lockstep.lifetime and lockstep.loopback"
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


LEAF_MODULES = ("lockstep.clock", "lockstep.cache", "lockstep.lifetime", "lockstep.loopback")
# Left for a follow-up of issue 36 (another change edits this module now): the recorder profiles and
# the protocol lookup replay uses still come from lockstep.models here. The test below fails once the
# exception is no longer needed, so it cannot outlive its cause.
CHECKERS_EXCEPTIONS = {"lockstep/checkers/conformance/model_choice.py": "lockstep.models"}


def checkers_import_spec_and_traces(item: Import) -> str | None:
    if not in_folder(item, "checkers") or item.root != "lockstep":
        return None
    if item.within("lockstep.spec", "lockstep.traces", "lockstep.checkers", *LEAF_MODULES):
        return None
    if CHECKERS_EXCEPTIONS.get(item.file) is not None and item.within(CHECKERS_EXCEPTIONS[item.file]):
        return None
    allowed = "lockstep.spec, lockstep.traces, itself and the leaf modules " + ", ".join(LEAF_MODULES)
    return f"imports {item.target}: checkers imports only {allowed}"


def leaf_modules_import_nothing_of_the_project(item: Import) -> str | None:
    leaves = {name.replace(".", "/") + ".py" for name in LEAF_MODULES}
    if item.file in leaves and item.root == "lockstep":
        return f"imports {item.target}: a leaf module imports nothing of the project"
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
    checkers_import_spec_and_traces,
    leaf_modules_import_nothing_of_the_project,
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
        (
            "lockstep/checkers/fake.py",
            "from lockstep.models import get_protocol\nfrom lockstep.impl.launcher import launch\n"
            "from lockstep.spec.machine import Machine\nfrom lockstep.cache import Store\n",
            [
                "lockstep/checkers/fake.py:1 imports lockstep.models.get_protocol: checkers imports only",
                "lockstep/checkers/fake.py:2 imports lockstep.impl.launcher.launch: checkers imports only",
            ],
        ),
        (
            "lockstep/clock.py",
            "from lockstep.spec import sorts\n",
            ["lockstep/clock.py:1 imports lockstep.spec.sorts: a leaf"],
        ),
        ("lockstep/cli/check.py", "import rich\nfrom lockstep.checkers import check\n", []),
    ],
)
def test_the_rules_catch_each_kind_of_violation(relative: str, source: str, expected: list[str]) -> None:
    found = violations(fake(relative, source))
    assert len(found) == len(expected), found
    for message, prefix in zip(found, expected):
        assert message.startswith(prefix), (message, prefix)


def test_each_checkers_exception_is_still_needed() -> None:
    items = all_imports()
    for file, package in CHECKERS_EXCEPTIONS.items():
        assert any(item.file == file and item.within(package) for item in items), (
            f"{file} no longer imports {package}: remove it from CHECKERS_EXCEPTIONS"
        )


def built_in_names() -> set[str]:
    """Every built-in protocol's name, its variants' names and its properties' names, less the
    spec's own (the built-in properties and the pre-fix/post-fix variant names every protocol shares)."""
    from lockstep.models import PROTOCOLS
    from lockstep.spec import definitions, protocol

    shared = {
        definitions.IN_BOUNDS,
        definitions.WELL_DEFINED,
        definitions.NO_DEADLOCK,
        definitions.NO_COLLECTIVE_MISMATCH,
        definitions.NO_HANG,
        protocol.PRE_FIX,
        protocol.POST_FIX,
    }
    names: set[str] = set()
    for name, built_in in PROTOCOLS.items():
        names.add(name)
        for variant in built_in.variants:
            names.add(variant.name)
            names.update(prop.name for prop in built_in.instance(variant.name).machine().properties)
    return names - shared


# Protocol data that still lives in checkers (see CHECKERS_EXCEPTIONS): the reference runtime's recorder profiles.
NAME_EXCEPTIONS = {"lockstep/checkers/conformance/model_choice.py"}


def names_in(text: str, names: set[str]) -> list[str]:
    return sorted(name for name in names if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text))


def test_no_built_in_protocol_variant_or_property_name_appears_under_checkers() -> None:
    names = built_in_names()
    assert {"dp-pause", "pp-broadcast"} <= names and len(names) > 20  # the names were read
    hits = []
    for file in sorted((PACKAGE / "checkers").rglob("*.py")):
        relative = str(file.relative_to(ROOT))
        found = names_in(file.read_text(encoding="utf-8"), names)
        if relative in NAME_EXCEPTIONS:
            assert found, f"{relative} names no built-in protocol now: remove it from NAME_EXCEPTIONS"
        elif found:
            hits.append(f"{relative}: {', '.join(found)}")
    assert not hits, (
        "built-in names under lockstep/checkers (protocol data goes to models/ or impl/):\n  " + "\n  ".join(hits)
    )


def test_the_name_search_sees_a_name_in_prose_and_code() -> None:
    names = {"dp-pause", "no_double_pause"}
    assert names_in('PROFILE = {"dp-pause": 1}  # see no_double_pause', names) == ["dp-pause", "no_double_pause"]
    assert names_in("vllm-dp-pause and no_double_pause_twice", names) == []
