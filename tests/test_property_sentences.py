"""Every property verdict comes with a sentence saying what the check established (issue 39): in the
human table's detail column and in ``check --json``'s ``detail``, whatever the engine, the kind and
the verdict; where the engine gives no detail of its own, the report builds one from the verdict,
the path and the search's statistics."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lockstep.checkers import check
from lockstep.checkers.result import Verdict
from lockstep.cli import main
from lockstep.cli.report import property_detail
from lockstep.models import get_protocol
from lockstep.spec.machine import Machine, PropertyKind


def computed_tokens(variant: str) -> Machine:
    return get_protocol("computed-tokens").instance(variant, "seed").machine()


@pytest.mark.parametrize(
    ("variant", "engine", "options"),
    [
        ("post-fix", "bfs", {}),
        ("pre-fix", "bfs", {}),
        ("post-fix", "dfs", {}),
        ("post-fix", "bfs-vec", {}),
        ("post-fix", "bmc", {"depth": 4}),
        ("pre-fix", "bmc", {"depth": 14}),
        ("post-fix", "induction", {"k": 2}),
        ("post-fix", "certify", {}),
    ],
)
def test_every_verdict_of_every_engine_has_a_sentence(variant: str, engine: str, options: dict[str, Any]) -> None:
    result = check(computed_tokens(variant), engine, **options)
    for item in result.properties:
        assert property_detail(result, item).strip(), (engine, item)


def test_an_exhaustive_search_says_how_many_states_a_holding_property_held_in() -> None:
    result = check(computed_tokens("post-fix"), "bfs")
    states = result.stats.states
    assert states is not None and states > 1
    sentences = {item.name: property_detail(result, item) for item in result.properties}
    assert sentences["U1_sound"] == f"holds in every reachable state (exhaustive search: {states:,} distinct states)"
    assert (
        sentences["no_deadlock"] == f"no reachable state is a deadlock (exhaustive search: {states:,} distinct states)"
    )
    witness = result.property_result("all_finished").path
    assert witness is not None
    assert sentences["all_finished"] == f"a state where it holds is reached in {witness.length} steps"


def test_a_violation_without_an_engine_detail_says_where_it_was_found() -> None:
    result = check(computed_tokens("pre-fix"), "bfs")
    violated = result.property_result("U3_bounded_slack")
    assert violated.verdict is Verdict.VIOLATED and violated.path is not None and not violated.detail
    assert property_detail(result, violated) == f"violated by a state reached in {violated.path.length} steps"


def test_the_engine_detail_is_kept_where_it_gave_one() -> None:
    result = check(computed_tokens("post-fix"), "bmc", depth=3)
    item = result.property_result("U1_sound")
    assert item.detail and property_detail(result, item) == item.detail


def test_check_json_and_table_carry_the_sentence(
    capsys: pytest.CaptureFixture[str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # the table's detail column unwrapped
    main(["check", "computed-tokens", "--engine", "bfs", "--json", "--trace-out", str(tmp_path / "t.jsonl")])
    document = json.loads(capsys.readouterr().out)
    details = {item["name"]: item["detail"] for item in document["properties"]}
    assert all(details.values()), details
    assert details["U1_sound"].startswith("holds in every reachable state (exhaustive search: ")
    kinds = {item["kind"] for item in document["properties"]}
    assert PropertyKind.SOMETIMES.value in kinds
    main(["check", "computed-tokens", "--engine", "bfs", "--trace-out", str(tmp_path / "t.jsonl")])
    captured = capsys.readouterr()
    assert details["U1_sound"] in captured.out + captured.err
