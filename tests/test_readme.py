"""The README's model example runs as written and prints what the README says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


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
    assert commands[1].endswith("python -m pytest") and "torch==2.13.0" in commands[1]
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
