"""docs/recording-vllm.md: its event tables are generated from the models and must not be stale.

Every recorded action of every built-in model (each variant, each instance) names the vLLM
function(s) it mirrors; every entry of a model's ``sources`` table is an action of that model (a
misspelt name would silently mirror nothing); the tables between the document's markers equal
what ``tools/recording_tables.py`` generates, and its ``--check`` fails on a stale document.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lockstep.models import PROTOCOLS
from lockstep.spec.collectives import Communicator

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "recording_tables.py"
DOCUMENT = ROOT / "docs" / "recording-vllm.md"
MODELS = {
    "pp-broadcast": "pp_broadcast",
    "async-placeholders": "async_placeholders",
    "computed-tokens": "computed_tokens",
    "cudagraph-pp": "cudagraph_pp",
}


def load_tool() -> object:
    sys.path.insert(0, str(TOOL.parent))
    try:
        return importlib.import_module("recording_tables")
    finally:
        sys.path.remove(str(TOOL.parent))


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_every_recorded_action_names_its_vllm_function(name: str) -> None:
    protocol = PROTOCOLS[name]
    for variant in protocol.variants:
        for instance in protocol.instances:
            machine = protocol.instance(variant.name, instance.name).machine()
            inferred = {
                action
                for library in machine.communicators
                if isinstance(library, Communicator)
                for action in library.completion_actions
            }
            missing = [action.name for action in machine.actions if not action.mirrors and action.name not in inferred]
            assert not missing, f"{name} {variant.name} {instance.name}: no mirrors for {missing}"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_source_entry_is_an_action(name: str) -> None:
    protocol = PROTOCOLS[name]
    module = importlib.import_module(f"lockstep.models.{MODELS[name]}.sources")
    for variant in protocol.variants:
        actions = {
            action.name
            for instance in protocol.instances
            for action in protocol.instance(variant.name, instance.name).machine().actions
        }
        table = module.sources(variant.name)
        assert set(table) <= actions, f"{name} {variant.name}: not actions: {sorted(set(table) - actions)}"
        assert all(text.strip() for text in table.values())


def test_the_document_tables_are_current() -> None:
    tool = load_tool()
    text = DOCUMENT.read_text()
    assert tool.splice(text, tool.generated()) == text, "run python tools/recording_tables.py"  # type: ignore[attr-defined]
    for name in PROTOCOLS:
        assert f"### {name}\n" in text
    assert (
        "| `handle_pause` | `rank:{rank}` | `rank` | _handle_client_request(UTILITY) → EngineCoreProc.pause_scheduler"
        in text
    )


def test_check_fails_on_a_stale_document(tmp_path: Path) -> None:
    stale = tmp_path / "recording-vllm.md"
    stale.write_text(DOCUMENT.read_text().replace("DPEngineCoreProc._pause_complete", "DPEngineCoreProc.pause"))
    command = [sys.executable, str(TOOL), "--check", "--document", str(stale)]
    failed = subprocess.run(command, capture_output=True, text=True, check=False)
    assert failed.returncode == 1 and "stale" in failed.stderr
    current = subprocess.run([*command[:-1], str(DOCUMENT)], capture_output=True, text=True, check=False)
    assert current.returncode == 0, current.stderr


def test_the_worked_examples_code_is_the_instrumentation_modules() -> None:
    """Every code block marked ``lockstep:excerpt PATH`` in the document appears verbatim in PATH."""
    import re

    excerpts = re.findall(r"<!-- lockstep:excerpt (\S+) -->\n```python\n(.*?)```", DOCUMENT.read_text(), re.S)
    assert len(excerpts) >= 2
    for path, code in excerpts:
        assert code in (ROOT / path).read_text(), f"docs/recording-vllm.md's excerpt of {path} is stale"


def test_the_api_example_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The document's first example runs as written (torch's collective stubbed): its parameters are
    within the model's bounds, and its events are the model's."""
    import types

    from lockstep.traces.merge import open_traces

    example = re.findall(r"```python\n(.*?)```", DOCUMENT.read_text(), re.S)[0]
    monkeypatch.chdir(tmp_path)
    stub = types.SimpleNamespace(distributed=types.SimpleNamespace(all_reduce=lambda tensor, group: None))
    exec(example, {"torch": stub, "dp_rank": 0, "dp_size": 2, "tensor": None, "dp_group": None})  # noqa: S102
    trace = open_traces([str(tmp_path / "runs" / "1")])
    assert trace.header["parameters"]["requests"] == 3
    assert [record.event["action"] for record in trace.records()] == ["handle_pause", "enter", "complete"]
