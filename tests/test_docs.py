"""Users' own models: docs/adding-a-protocol.md's example, `--model-file`, and entry points.

The example model is extracted from the document itself, so the walkthrough cannot drift from
what works. Entry points are exercised with a real distribution (a ``*.dist-info`` folder with an
``entry_points.txt``) on ``sys.path``, which ``importlib.metadata`` discovers as pip-installed ones.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import pytest

from lockstep.checkers import Verdict, check
from lockstep.cli import main
from lockstep.models import get_protocol
from lockstep.models.external import load_model_file
from lockstep.spec.protocol import UsageError

DOC = Path(__file__).resolve().parent.parent / "docs" / "adding-a-protocol.md"


def example_source() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    return blocks[0]


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    file = tmp_path / "early_stop.py"
    file.write_text(example_source())
    return file


def run(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    code = main(list(arguments))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_documented_model_behaves_as_the_document_says(model_file: Path) -> None:
    protocol = load_model_file(model_file)
    assert protocol.name == "early-stop"
    pre = check(protocol.instance("pre-fix"), engine="bfs")
    assert pre.verdict is Verdict.VIOLATED
    hang = pre.property_result("no_hang")
    assert hang.verdict is Verdict.VIOLATED and hang.path is not None and hang.path.length == 7
    assert (
        pre.counterexample is not None and pre.counterexample.path is not None and pre.counterexample.path.length == 7
    )
    assert [step.action for step in hang.path.steps][-1] == "stop_locally"
    post = check(protocol.instance("post-fix"), engine="bfs")
    assert post.verdict is Verdict.HOLDS
    assert check(protocol.instance("post-fix", ranks=4), engine="bfs").verdict is Verdict.HOLDS
    # The document's test snippet, run as written against the extracted module.
    snippet = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[1]
    namespace: dict[str, object] = {"PROTOCOL": protocol}
    exec(snippet, namespace)  # noqa: S102 - the documentation's own example
    namespace["test_pre_fix_hangs"]()  # type: ignore[operator]


CONSTRUCTS = (  # what section 5 shows, each in an example that runs
    *("BOOL", "integers(", "enum(", "IndexSort(", "MapSort(", "SequenceSort(", "record(", "record_of("),
    *("if_then_else(", ".implies(", ".append(", ".head()", ".tail()", ".field(", "Kind.NONE", "NOBODY"),
    *("all_of(", "any_of(", "count_of(", "sum_of(", "max_of(", "declare_symmetric(", "symmetry=True"),
    *("set_final(", "always(", "sometimes(", "leads_to(", "fair="),
)


def test_every_construct_of_the_spec_language_is_shown_in_an_example_that_runs() -> None:
    """Section 5's examples, each run as written: their own checks (verdicts, a lasso, fewer states
    under symmetry) are part of them."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[2:]
    assert len(blocks) == 3
    shown = "\n".join(blocks)
    assert [construct for construct in CONSTRUCTS if construct not in shown] == []
    for number, block in enumerate(blocks, start=3):
        exec(compile(block, f"{DOC.name}, python block {number}", "exec"), {"__name__": f"block_{number}"})  # noqa: S102


def test_the_documented_commands(
    capsys: pytest.CaptureFixture[str], model_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "list", "--model-file", str(model_file))[0] == 0
    assert run(capsys, "check", "--model-file", str(model_file), "--variant", "pre-fix")[0] == 1
    assert run(capsys, "check", "--model-file", str(model_file), "--variant", "post-fix")[0] == 0
    code, out, _ = run(
        capsys,
        "check",
        "--model-file",
        str(model_file),
        "--variant",
        "pre-fix",
        "--engine",
        "bmc",
        "--depth",
        "8",
        "--json",
    )
    assert code == 1 and json.loads(out)["counterexample"]["length"] == 7
    code, out, _ = run(capsys, "check", "--all", "--model-file", str(model_file), "--json")
    assert code == 0 and [item["protocol"] for item in json.loads(out)["checks"]] == ["early-stop", "early-stop"]
    code, markdown, _ = run(capsys, "check", "--all", "--model-file", str(model_file), "--markdown")
    assert code == 0 and markdown.startswith("|") and "early-stop" in markdown  # the tables alone, on stdout
    code, _, err = run(capsys, "check", "dp-pause", "--model-file", str(model_file))
    assert code == 2 and "defines protocol 'early-stop', not 'dp-pause'" in err
    for engine in ("bfs", "bfs-vec"):  # a model file runs on the vectorised kernels too, with the reference's figures
        code, out, _ = run(
            capsys,
            "check",
            "--model-file",
            str(model_file),
            "--variant",
            "pre-fix",
            "--engine",
            engine,
            "--ranks",
            "4",
            "--json",
        )
        payload = json.loads(out)
        figures = (
            code,
            payload["engine"],
            payload["stats"]["states"],
            payload["stats"]["transitions"],
            payload["counterexample"]["length"],
        )
        if engine == "bfs":
            reference = figures[2:]
        else:
            assert figures == (1, "bfs-vec", *reference)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("x = 1\n", "defines no PROTOCOL"),
        ("import os\n\ndef broken(:\n", "early_stop.py:3: loading the model failed: SyntaxError"),
        ("VALUE = 1\nraise RuntimeError('boom')\n", "early_stop.py:2: loading the model failed: RuntimeError: boom"),
    ],
)
def test_a_bad_model_file_is_exit_2_with_file_and_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, source: str, message: str
) -> None:
    file = tmp_path / "early_stop.py"
    file.write_text(source)
    code, out, err = run(capsys, "check", "--model-file", str(file))
    assert code == 2 and out == ""
    assert message in " ".join(err.split()) and "Traceback" not in err


def test_a_missing_or_non_python_model_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such model file"):
        load_model_file(tmp_path / "absent.py")
    (tmp_path / "model.txt").write_text("PROTOCOL = 1")
    with pytest.raises(UsageError, match=r"a model file is a Python module"):
        load_model_file(tmp_path / "model.txt")


def test_an_entry_point_registers_a_protocol_by_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "third_party_models"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "early_stop.py").write_text(example_source())
    info = tmp_path / "third_party_models-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: third-party-models\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[lockstep.models]\nearly-stop = third_party_models.early_stop\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    monkeypatch.chdir(tmp_path)
    assert get_protocol("early-stop").name == "early-stop"
    assert run(capsys, "check", "early-stop", "--variant", "pre-fix")[0] == 1
    with pytest.raises(UsageError, match="unknown protocol 'nope'.*early-stop"):
        get_protocol("nope")
    sys.modules.pop("third_party_models.early_stop", None)
    sys.modules.pop("third_party_models", None)


def test_the_runtime_page_names_every_runtime_protocol_variant_scenario_and_setting() -> None:
    """docs/runtime.md's table keeps up with the runtime's registry."""
    from lockstep.impl.protocols import RUNTIME_PROTOCOLS

    page = (Path(__file__).resolve().parent.parent / "docs" / "runtime.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip().strip("`"): line for line in page.splitlines() if line.startswith("| `")}
    for protocol in RUNTIME_PROTOCOLS.values():
        assert protocol.name in rows, f"docs/runtime.md has no row for {protocol.name}"
        row = rows[protocol.name]
        for name in (*protocol.variants, *protocol.scenarios, *protocol.settings):
            assert f"`{name}`" in row, f"docs/runtime.md's {protocol.name} row does not name {name}"
