"""Every property of the five vLLM models names the vLLM lines that state it (``Property.sources``, from each
model's ``sources.PROPERTY_SOURCES``), and the language's ``source=`` / ``Machine.cite`` behave: a property a model
adds without a source, a table entry for no property, a cited release the model does not cover, or a cited vLLM
test its ledger does not list fails here."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from lockstep.checkers import check
from lockstep.models import get_protocol
from lockstep.models.async_placeholders import sources as async_placeholders_sources
from lockstep.models.computed_tokens import sources as computed_tokens_sources
from lockstep.models.cudagraph_pp import sources as cudagraph_pp_sources
from lockstep.models.dp_pause import sources as dp_pause_sources
from lockstep.models.pp_broadcast import sources as pp_broadcast_sources
from lockstep.spec.definitions import PropertyKind
from lockstep.spec.machine import Machine, Source
from lockstep.spec.protocol import Protocol
from lockstep.spec.sorts import IntSort
from lockstep.spec.terms import DefinitionError, Term

TABLES = {
    "dp-pause": dp_pause_sources.PROPERTY_SOURCES,
    "pp-broadcast": pp_broadcast_sources.PROPERTY_SOURCES,
    "async-placeholders": async_placeholders_sources.PROPERTY_SOURCES,
    "computed-tokens": computed_tokens_sources.PROPERTY_SOURCES,
    "cudagraph-pp": cudagraph_pp_sources.PROPERTY_SOURCES,
}
LEDGERS = Path(__file__).resolve().parent.parent / "docs" / "models"


def machines(protocol: Protocol) -> list[Machine]:
    return [
        protocol.instance(variant.name, instance.name).machine()
        for variant in protocol.variants
        for instance in protocol.instances
    ]


@pytest.fixture(scope="module", params=sorted(TABLES))
def protocol(request: pytest.FixtureRequest) -> Protocol:
    return get_protocol(request.param)


def test_every_property_a_model_declares_names_its_source(protocol: Protocol) -> None:
    """Every invariant and leads-to property of every variant × instance has a source; the witnesses (reachability
    checks) and lockstep's own built-in checks (in_bounds, well_defined, no_deadlock, no_hang,
    no_collective_mismatch) are not vLLM's statements and may have none."""
    unsourced = sorted(
        {
            prop.name
            for machine in machines(protocol)
            for prop in machine.properties
            if not prop.builtin and prop.kind is not PropertyKind.SOMETIMES and not prop.sources
        }
    )
    assert not unsourced, f"{protocol.name}: add these to sources.PROPERTY_SOURCES: {unsourced}"


def test_every_table_entry_is_a_property_of_some_machine(protocol: Protocol) -> None:
    declared = {prop.name for machine in machines(protocol) for prop in machine.properties}
    assert sorted(set(TABLES[protocol.name]) - declared) == []


def test_every_cited_release_is_one_the_model_covers(protocol: Protocol) -> None:
    """A line is cited from a release the model maps to a variant, and from a vLLM file or test."""
    for name, cited in TABLES[protocol.name].items():
        assert cited, name
        for source in cited:
            assert protocol.release_variant(source.release) is not None, (name, str(source))
            assert source.file.startswith(("vllm/", "tests/")) and source.file.endswith(".py"), (name, str(source))
            assert (source.kind == "test") == source.file.startswith("tests/"), (name, str(source))
            if source.kind == "test":
                assert source.function.startswith("test_"), (name, str(source))


def test_the_ledger_lists_every_cited_vllm_test(protocol: Protocol) -> None:
    """Each vLLM test a property cites as its oracle appears in the model's ledger, by file and function."""
    ledger = (LEDGERS / f"{protocol.name}.md").read_text(encoding="utf-8")
    missing = sorted(
        {
            f"{source.file}::{source.function}"
            for cited in TABLES[protocol.name].values()
            for source in cited
            if source.kind == "test" and (source.function not in ledger or source.file not in ledger)
        }
    )
    assert not missing


def test_sources_change_no_verdict_or_count() -> None:
    """A machine whose sources are stripped explores the same states with the same verdicts."""
    instance = get_protocol("cudagraph-pp").instance("post-fix", "seed")
    cited = check(instance, engine="bfs")
    stripped = instance.machine()
    assert any(prop.sources for prop in stripped.properties)
    stripped.properties = [replace(prop, sources=()) for prop in stripped.properties]
    bare = check(stripped, engine="bfs")
    assert (bare.verdict, bare.stats.states) == (cited.verdict, cited.stats.states)
    assert [(item.name, item.verdict) for item in bare.properties] == [
        (item.name, item.verdict) for item in cited.properties
    ]


SOURCE = Source("0.33.0", "vllm/v1/engine/core.py", 2388, "DPEngineCoreProc.resume_scheduler", "raise", 2393)


def counter_machine() -> tuple[Machine, Term]:
    machine = Machine("counter")
    count = machine.variable("count", IntSort(0, 2), 0)
    return machine, count


def test_source_keyword_and_cite_record_sources() -> None:
    machine, count = counter_machine()
    other = Source("0.33.0", "tests/v1/engine/test_engine_core.py", 684, "test_dp_sync", "test")
    machine.always("bounded", count <= 2, source=SOURCE)
    machine.always("positive", count >= 0, source=[SOURCE, other])
    machine.sometimes("zero", count == 0)
    assert [prop.sources for prop in machine.properties] == [(SOURCE,), (SOURCE, other), ()]
    machine.cite({"zero": other, "bounded": (other,), "absent": SOURCE})
    assert [prop.sources for prop in machine.properties] == [(other,), (SOURCE, other), (other,)]
    assert str(SOURCE) == "vllm/v1/engine/core.py:2388-2393 DPEngineCoreProc.resume_scheduler (raise, 0.33.0)"


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"line": 0}, "line must be a positive integer"),
        ({"last_line": 2000}, "last_line must not be before line"),
        ({"kind": "hunch"}, "kind must be one of assert, raise, comment, docstring, code, test"),
        ({"function": " "}, "function is empty"),
    ],
)
def test_a_malformed_source_is_refused(fields: dict[str, object], problem: str) -> None:
    values: dict[str, object] = {**SOURCE.__dict__, **fields}
    with pytest.raises(DefinitionError, match=problem):
        Source(**values)  # type: ignore[arg-type]


def test_source_takes_source_records_only() -> None:
    machine, count = counter_machine()
    with pytest.raises(DefinitionError, match="property 'bounded': source= takes Source records"):
        machine.always("bounded", count <= 2, source=["core.py 2388"])  # type: ignore[list-item]
    with pytest.raises(DefinitionError, match="property 'x': source= takes Source records"):
        machine.cite({"x": ("core.py",)})  # type: ignore[dict-item]
