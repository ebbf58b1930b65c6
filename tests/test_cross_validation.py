"""Cross-validation of the explicit engine and BMC on the pinned instances of every built-in model.

For an instance × variant and a depth D, per property:
- a violation BFS finds at length L <= D, BMC finds at exactly L (BMC deepens one step at a time,
  so that is also the shortest it can find), and the top-level counterexample lengths agree;
- a ``sometimes`` witness BFS finds at length L <= D, BMC finds at exactly L;
- a property BFS proves (or finds violated only beyond D), BMC finds not violated within D; when D
  is the instance's diameter (the deepest BFS level), that is "none up to the diameter".

Fast tier (always run; ~2.5 minutes of CPU): ``FAST`` names, per seed instance × variant, depths
and the properties BMC is asked there. Together they cover every shortest violation and witness BFS
finds on those seeds (a coverage test fails if a model change makes one longer than its entry's
depth), so every model has its lengths pinned, dp-pause included. Where the depth also reaches
the diameter (computed-tokens, async-placeholders, cudagraph-pp) the properties BFS proves are
checked up to the diameter too. pp-broadcast's seeds (diameters 28-38) are checked to their violations and witnesses
only (all
properties to 12; skip-disagree's ``no_hang``/``no_deadlock`` alone to 28);
dp-pause's seeds are asked only their violated properties (pre-fix: ``quiescent_during_rpc`` at 17,
~45 s of CPU; ignore-wave-while-paused: ``no_hang``/``no_deadlock`` at 13, ~28 s): BMC's per-depth
time on dp-pause about doubles beyond depth 12, so pre-fix ``no_hang``/``no_deadlock`` at 20 and the
``resumed`` witnesses at 32 (``FAST_UNCOVERED``) are left to the slow tier, and dp-pause's post-fix
seed (no violation; ``resumed`` at 44) has no fast entry.

Slow tier (``-m slow``): every pinned instance to its deepest BFS length or its diameter, capped at
``SLOW_DEPTH`` (``SLOW_DEPTH_DP_PAUSE`` for dp-pause). The caps are honest limits, not proofs:
dp-pause's diameters (56-98) and ``resumed`` witnesses (32-44) and pp-broadcast's larger diameters
(up to 95) lie beyond them, so there the claim is "none within the cap", not "none up to the
diameter". The explicit engine runs inside the tests, never at collection.
"""

from __future__ import annotations

from functools import cache

import pytest

from lockstep.checkers import CheckResult, Verdict, check
from lockstep.cli.check import pinned_instances
from lockstep.models import PROTOCOLS
from lockstep.spec.machine import PropertyKind

# (instance, depth, properties asked; None: all). Each seed's BFS lengths are noted; the
# coverage test checks that every one of them is asked of some entry deep enough.
FAST: list[tuple[str, int, tuple[str, ...] | None]] = [
    ("pp-broadcast:pre-fix:seed", 12, None),  # no_false_dependency 10; L2 has no witness at all
    ("pp-broadcast:post-fix:seed", 12, None),  # L2_pipelined_prefill witnessed at 12
    ("pp-broadcast:skip-disagree:seed", 12, None),  # S1 10, L2 12 (no_hang, no_deadlock: 28, next)
    ("pp-broadcast:skip-disagree:seed", 28, ("no_hang", "no_deadlock")),  # both 28
    ("pp-broadcast:skip-whole-receive:seed", 12, None),  # L2 12
    ("dp-pause:pre-fix:seed", 17, ("quiescent_during_rpc",)),  # the top-level counterexample, 17
    ("dp-pause:ignore-wave-while-paused:seed", 13, ("no_hang", "no_deadlock")),  # both 13
    ("async-placeholders:pre-fix:seed", 20, None),  # scan_cost_bounded 17, repaired 12; diameter 20
    ("async-placeholders:post-fix:seed", 20, None),  # repaired 12; diameter 20
    ("computed-tokens:pre-fix:seed", 16, None),  # U3_bounded_slack 13, all_finished 12, optimistic_bound 9; diameter 16
    ("computed-tokens:post-fix:seed", 16, None),  # all_finished 12, optimistic_bound 9; diameter 16
    ("cudagraph-pp:pre-fix:seed", 12, None),  # no witness of graph_replayed_on_non_first_rank; diameter 12
    ("cudagraph-pp:post-fix:seed", 18, None),  # graph_replayed 12; diameter 18
    ("cudagraph-pp:no-persistent-buffer:seed", 18, None),  # A1 12, A2 12
    ("cudagraph-pp:no-copy-in:seed", 18, None),  # A2 12
    ("cudagraph-pp:missing-key:seed", 18, None),  # K1 10, A2 12
    ("cudagraph-pp:full-adjustment:seed", 18, None),  # R1 8
    ("cudagraph-pp:no-send-wait:seed", 18, None),  # A3 11, A2 14
    ("pd-kv-transfer:pre-fix:seed", 20, None),  # transfer_completes 10; diameter 20
    ("pd-kv-transfer:post-fix:seed", 20, None),  # transfer_completes 10; diameter 20
    ("dp-step-coordination:pre-fix:seed", 36, None),  # dummy_step 1, all_ranks_finish 36; diameter 36
    ("dp-step-coordination:post-fix:seed", 20, None),  # dummy_step 1, all_ranks_finish 20; diameter 20
]
# dp-pause seeds whose BFS lengths the fast tier leaves to the slow tier (too deep for BMC in CI):
FAST_UNCOVERED = {
    "dp-pause:pre-fix:seed": {"no_hang": 20, "no_deadlock": 20, "resumed": 32},
    "dp-pause:ignore-wave-while-paused:seed": {"resumed": 32},
}
SLOW_DEPTH = 40  # the slow tier goes to the deepest BFS length, or the diameter, up to this cap
SLOW_DEPTH_DP_PAUSE = 20  # dp-pause: BMC's per-depth time doubles beyond ~12
INSTANCES = {
    f"{instance.protocol.name}:{instance.variant}:{instance.name}": instance for instance in pinned_instances()
}


@cache
def explicit(key: str) -> CheckResult:
    return check(INSTANCES[key], engine="bfs")


def _lengths(result: CheckResult) -> dict[str, int | None]:
    """Each property's BFS length: the shortest violation or witness; None when there is none."""
    return {item.name: (item.path.length if item.path is not None else None) for item in result.properties}


def compare(key: str, depth: int, asked: tuple[str, ...] | None) -> None:
    """BMC to ``depth`` on the properties ``asked`` agrees with BFS as the module docstring says."""
    reference = explicit(key)
    kinds = {prop.name: prop.kind for prop in reference.machine.properties}
    lengths = {name: length for name, length in _lengths(reference).items() if asked is None or name in asked}
    assert asked is None or set(asked) <= set(lengths), f"{key}: no such property among {sorted(kinds)}"
    symbolic = check(INSTANCES[key], "bmc", depth=depth, properties=list(asked) if asked is not None else None)
    assert [item.name for item in symbolic.properties] == list(lengths)
    for name, length in lengths.items():
        mine = symbolic.property_result(name)
        if kinds[name] is PropertyKind.LEADS_TO:  # liveness is the explicit engines' alone
            assert mine.verdict is Verdict.INCONCLUSIVE
        elif kinds[name] is PropertyKind.SOMETIMES:
            if length is not None and length <= depth:
                assert mine.verdict is Verdict.HOLDS and mine.path is not None, (
                    f"{name}: BFS witness at {length}, BMC {mine.verdict}"
                )
                assert mine.path.length == length, f"{name}: BFS witness at {length}, BMC at {mine.path.length}"
            else:
                assert mine.verdict is Verdict.INCONCLUSIVE and mine.path is None, (
                    f"BMC witnesses {name} earlier than BFS"
                )
        elif length is not None and length <= depth:
            assert mine.verdict is Verdict.VIOLATED and mine.path is not None, (
                f"{name}: BFS violation at {length}, BMC {mine.verdict}"
            )
            assert mine.path.length == length, f"{name}: BFS violation at {length}, BMC at {mine.path.length}"
        else:
            assert mine.verdict is Verdict.HOLDS_WITHIN_BOUND, (
                f"BMC: {name} {mine.verdict} within {depth}; BFS: {length}"
            )
    shortest = reference.counterexample
    if shortest is not None and shortest.path is not None and shortest.path.length <= depth:
        if asked is None or shortest.name in asked:
            assert symbolic.counterexample is not None and symbolic.counterexample.path is not None
            assert symbolic.counterexample.path.length == shortest.path.length


def test_the_fast_tier_covers_every_model_and_pins_each_seed_length() -> None:
    """Every model is in the fast tier, and every shortest violation or witness BFS finds on a
    seed listed there is asked of an entry at least that deep (else: raise the entry's depth),
    except the dp-pause lengths ``FAST_UNCOVERED`` names, which must stay exactly as noted."""
    assert {key.split(":")[0] for key, _, _ in FAST} == set(PROTOCOLS)
    for key in sorted({key for key, _, _ in FAST}):
        assert key in INSTANCES, key
        lengths = {name: length for name, length in _lengths(explicit(key)).items() if length is not None}
        covered = {
            name
            for entry, depth, asked in FAST
            if entry == key
            for name in lengths
            if (asked is None or name in asked) and lengths[name] <= depth
        }
        assert {name: lengths[name] for name in set(lengths) - covered} == FAST_UNCOVERED.get(key, {}), key


@pytest.mark.parametrize(
    ("key", "depth", "asked"),
    [
        pytest.param(key, depth, asked, id=f"{key}@{depth}" + ("" if asked is None else f"[{','.join(asked)}]"))
        for key, depth, asked in FAST
    ],
)
def test_bmc_pins_the_explicit_lengths_on_the_seeds(key: str, depth: int, asked: tuple[str, ...] | None) -> None:
    """BMC agrees with BFS as the module docstring says; every entry pins at least one length."""
    lengths = {name: length for name, length in _lengths(explicit(key)).items() if asked is None or name in asked}
    assert any(length is not None and length <= depth for length in lengths.values()) or asked is None, key
    compare(key, depth, asked)


@pytest.mark.slow
@pytest.mark.parametrize("key", list(INSTANCES))
def test_bmc_agrees_with_the_explicit_engine_up_to_the_diameter_or_a_cap(key: str) -> None:
    """Every pinned instance: to the deepest BFS length or the diameter (BFS's deepest level),
    whichever is larger, capped (see the module docstring)."""
    reference = explicit(key)
    lengths = [length for length in _lengths(reference).values() if length is not None]
    cap = SLOW_DEPTH_DP_PAUSE if key.startswith("dp-pause:") else SLOW_DEPTH
    compare(key, min(max([*lengths, reference.stats.depth or 0]), cap), None)
