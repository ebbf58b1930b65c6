"""The README's commands and examples run as written, and its generated summary and the findings' table of
smallest delay bounds (docs/protocols.md) keep up with the models."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
from pathlib import Path
from types import ModuleType

import pytest

from lockstep.cli.check import pinned_instances

README = Path(__file__).resolve().parent.parent / "README.md"
PROTOCOLS_PAGE = README.parent / "docs" / "protocols.md"


def test_the_writing_a_model_example_runs() -> None:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Writing a model") :]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code.group(1), "README.md", "exec"), {})  # noqa: S102 - our own README
    assert printed.getvalue().strip() == "['vote', 'shortcut']"


def test_the_first_two_commands_are_the_setup_commands() -> None:
    commands = re.findall(r"```bash\n(.*?)\n```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert commands[0].endswith("lockstep check --all") and "torch==2.13.0" in commands[0]
    assert commands[1].endswith("python -m pytest -n auto") and "torch==2.13.0" in commands[1]
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1] in ci  # CI runs exactly the README's test command


pytest_plugins = ["pytester"]


def test_the_test_suite_example_passes_with_the_plugin(pytester: pytest.Pytester) -> None:
    """The README's complete test file for a user's suite runs and passes as written."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## In your own test suite") :]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None
    pytester.makepyfile(test_users_suite=code.group(1))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--lockstep-fuzz-examples=50", timeout=300)
    result.assert_outcomes(passed=2)


def _tool(name: str) -> ModuleType:
    path = README.parent / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_finding_has_its_smallest_max_delay_in_the_protocols_page() -> None:
    """(issue 18) Every finding: a released variant (post-fix or a later release) violating one of a finding
    instance's ``finding_properties`` in the pinned snapshot is in tools/finding_delays.py and in
    docs/protocols.md's table of smallest bounds."""
    snapshot = json.loads((README.parent / "tests" / "fixtures" / "model_snapshot.json").read_text())
    shown: set[tuple[str, str, str, str]] = set()
    for instance in pinned_instances():
        spec = instance.protocol.instance_spec(instance.name)
        variant = instance.protocol.variant(instance.variant)
        if not spec.finding or not (instance.variant == instance.protocol.default_variant or variant.later_release):
            continue
        properties = snapshot[f"{instance.protocol.name}/{instance.variant}/{instance.name}"]["result"]["properties"]
        assert spec.finding_properties, f"{instance.name}: a finding names its properties"
        for name in spec.finding_properties:
            if properties[name]["verdict"] == "violated":
                shown.add((instance.protocol.name, instance.variant, instance.name, name))
    listed = _tool("finding_delays").FINDINGS
    assert set(listed) == shown and len(listed) == len(shown)
    text = PROTOCOLS_PAGE.read_text(encoding="utf-8")
    table = text[text.index("| finding (protocol variant instance property) | smallest `max_delay` |") :]
    rows = re.findall(r"^\| `([^`]+)` \| (none|\d+) \|$", table.split("\n\n")[0], re.MULTILINE)
    assert [name for name, _ in rows] == [" ".join(finding) for finding in listed]


def test_the_readme_summary_is_the_summary_of_the_full_tables() -> None:
    """The README's protocol and finding tables are what tools/readme_tables.py makes of docs/protocols.md's
    generated tables (which tests/test_cli.py holds to a fresh ``check --all``)."""
    tables = _tool("readme_tables")
    page = PROTOCOLS_PAGE.read_text(encoding="utf-8")
    full = tables.between(page, tables.BEGIN, tables.END)
    shown = tables.between(README.read_text(encoding="utf-8"), tables.SUMMARY_BEGIN, tables.SUMMARY_END)
    expected = tables.summary(full, tables.smallest_delays(page))
    assert shown == expected, "README's summary is stale: run python tools/readme_tables.py"
    assert "| `dp-pause` |" in shown
    assert "| `dp-pause stale-wave-after-resume` | `no_hang` | v0.21.0 | none | new (" in shown


def test_the_findings_table_gives_each_finding_its_upstream_status_and_smallest_delay() -> None:
    """(issue 33) Every finding row of the README names what vLLM's issues and PRs say of it (known with the
    number, related, or new) and the smallest ``max_delay`` of each release's violation."""
    summary = README.read_text(encoding="utf-8").split("| finding (protocol instance) |")[1].split("<!--")[0]
    rows = [line.split(" | ") for line in summary.splitlines()[2:] if line.startswith("| `")]
    assert rows
    for cells in rows:
        upstream, delay = cells[-1].rstrip(" |"), cells[-2]
        assert re.match(r"(known: .*#\d+|related: .*#\d+|new\b)", upstream), cells[0]
        assert "not measured" not in delay and re.search(r"\d|none", delay), cells[0]
