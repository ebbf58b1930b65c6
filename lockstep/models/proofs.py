"""Pinned proofs: which post-fix properties ``--engine pdr`` proves for all depths, and their re-check.

For each protocol's post-fix ``seed`` (dp-pause: not pinned; see below and docs/engines.md), ``PINNED`` names the
safety properties that the pdr portfolio (Houdini, ABC's ``pdr`` on the circuit, Spacer) proves
within ``BUDGET`` seconds each, measured with ``bench/symbolic.py --pdr``. A proof covers every
depth of that instance, at its sizes (its ranks, requests, capacities): a property that depends
on the number of ranks is proved for the seed's ranks only; the all-sizes facts are the lemmas
of ``lockstep prove-lemmas``. Every other post-fix property is checked exhaustively at the pinned
sizes by the explicit engines (``check --all``), or remains open where pdr answers unknown.

``status`` gives one property's standing for ``lockstep list``; ``check --all --proofs`` re-runs pdr
on the pinned properties (``lockstep.checkers.symbolic.proofs``) and says which are not proved as pinned.
"""

from __future__ import annotations

BUDGET = 60.0  # CPU seconds of the provers per property (BMC and Houdini run first, once per model)

PINNED: dict[str, tuple[str, ...]] = {
    "pp-broadcast": (
        "in_bounds",
        "S1_broadcast_matching",
        "S2_predicate_agreement",
        "S3_no_stale_read",
        "reads_latest_token",
        "S4_placeholder_agreement",
        "S5_rpc_order",
        "no_false_dependency",
        "sample_only_with_state",
        "receive_only_on_non_last",
        "return_only_after_failure",
        "no_collective_mismatch",
        "no_hang",
        "no_deadlock",
    ),
    "async-placeholders": (
        "in_bounds",
        "suffix_form",
        "unused_slots_empty",
        "repair_postcondition",
        "scans_agree",
        "batch_aliases_request_list",
        "scan_cost_bounded",
        "list_matches_scheduler_count",
        "tokens_aligned",
        "placeholders_nonnegative",
        "no_deadlock",
    ),
    "computed-tokens": (
        "in_bounds",
        "U1_sound",
        "U2_exact",
        "U3_bounded_slack",
        "U3_within_max_model_len",
        "U4_prefill_progress",
        "U5_padding",
        "U6_mirror_converges",
        "no_deadlock",  # since ABC's pdr -n -c: 24.4 s on the 2-core machine (bench/symbolic.py --pdr)
    ),
}
# dp-pause is not pinned: at 2 ranks (H100 machine's CPUs, one process per property, 540 s each) pdr
# proved forward_counts_agree, pause_mode_semantics, no_collective_mismatch, paused_ranks_agree and
# sync_decisions_agree in 16-64 s each and left the six others unknown; at 60 s on the 2-core
# development machine not all five would be proved, so a pin would be a timing, not a fact. With
# strengthening, pdr -n -c, &scorr and GipSAT the six stay unknown at 450-480 s (README says why).
# With --mine-invariants (Houdini keeps 202 of 4,133 mined candidates) they stay unknown at 270 s of ABC each.

# Proved for every number of ranks N >= 2 by ``lockstep prove PROTOCOL --all-ranks`` and re-checked by
# separate Z3 queries (``lockstep.checkers.symbolic.all_ranks``; tests/test_all_ranks.py proves the pin).
ALL_RANKS: dict[str, tuple[str, ...]] = {"dp-pause": ("forward_counts_agree",)}

PROVED = "proved for all depths"
EXHAUSTIVE = "checked exhaustively at the pinned sizes"


def proved_for_all_ranks(protocol: str, prop: str) -> bool:
    """Whether a post-fix seed property is pinned as proved for every number of ranks."""
    return prop in ALL_RANKS.get(protocol, ())


def status(protocol: str, prop: str) -> str:
    """A post-fix seed property's standing: proved by pdr (pinned), else checked exhaustively."""
    return PROVED if prop in PINNED.get(protocol, ()) else EXHAUSTIVE
