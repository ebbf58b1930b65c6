"""One-line mutants of the reference runtime, and running ``lockstep test-runtime`` against them.

Each ``Mutant`` names a file of the ``lockstep`` package, the exact original line (without its
indentation), its replacement and the rule it weakens. ``mutated_package`` copies the package to a
temporary folder and applies one mutant there (the real source is never edited); an original line
that is not found exactly once fails loudly (``MutantError``), so a mutant cannot silently stop
applying when the runtime changes. ``run_test_runtime`` runs ``lockstep test-runtime`` in a
subprocess with that copy first on ``PYTHONPATH`` (the rank processes it spawns inherit it), and
a mutant is killed when the command exits 1: a run's trace diverges from the model, violates a
property, or the run hangs. ``bench/runtime_mutants.py`` prints the kill rate per protocol;
``tests/test_runtime_mutants.py`` asserts each non-equivalent mutant is killed.

Every mutant is run against the post-fix variant's ``seed`` instance, or the instance its
``options`` name (pp-broadcast's ``decode-gap``: the seed has one request, so no step mixes a
decode with a chunk and no gap is left; async-placeholders' ``spec-decode``: the seed has no
drafts).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "lockstep"


class MutantError(RuntimeError):
    """A mutant that does not apply: its original line is missing or not unique."""


@dataclass(frozen=True)
class Mutant:
    protocol: str
    name: str
    file: str  # relative to the lockstep package
    original: str  # the exact line, without its indentation
    replacement: str  # without indentation (the original's is kept)
    weakens: str
    equivalent: str = ""  # why no run can tell it from the original ("" for a mutant that must be killed)
    options: tuple[str, ...] = ()  # test-runtime options beyond the protocol's post-fix seed (an --instance)


# two requests and a gap: steps that mix a decode with a chunk happen
DECODE_GAP = ("--instance", "decode-gap")
# drafts: the seed has none, so rejected drafts never happen
SPEC_DECODE = ("--instance", "spec-decode")

MUTANTS = (
    # ------------------------------------------------------------------------------------ dp-pause
    Mutant(
        "dp-pause",
        "never-ignore-start-wave",
        "impl/dp_pause/engine.py",
        "if not (self.fixed and self.ignore_start_dp_wave):",
        "if True:",
        "the fix's core: post-fix never ignores START_DP_WAVE after pause consensus",
    ),
    Mutant(
        "dp-pause",
        "consensus-on-any-vote",
        "impl/dp_pause/surface.py",
        "return total[0] > 0 or total[1] % dp_group.size != 0, total[1] == dp_group.size",
        "return total[0] > 0 or total[1] % dp_group.size != 0, total[1] > 0",
        "pause consensus: on any rank's vote instead of every rank's",
    ),
    Mutant(
        "dp-pause",
        "partial-vote-stops",
        "impl/dp_pause/surface.py",
        "return total[0] > 0 or total[1] % dp_group.size != 0, total[1] == dp_group.size",
        "return total[0] > 0, total[1] == dp_group.size",
        "a partial pause vote keeps the wave running (the engines stop instead)",
    ),
    Mutant(
        "dp-pause",
        "resume-while-running",
        "impl/dp_pause/engine.py",
        "if self.pending_pause or (self.engines_running and self.ignore_start_dp_wave):",
        "if self.pending_pause:",
        "resume refuses while the pause is in flight (only the vote is checked)",
        equivalent="in every dp-pause instance where post-fix holds the client resumes once, after every pause "
        "returned, and a deferred pause returns only once consensus ended the wave (engines_running false): the "
        "model reaches no handle_resume with engines_running and ignore_start_dp_wave both set (test-runtime lists "
        "that decision goal as unreached); only a second resume (the double-resume finding, violated) gets there",
    ),
    Mutant(
        "dp-pause",
        "newer-wave-only",
        "impl/dp_pause/engine.py",
        "if exclude_engine_index != self.engine_index and new_wave >= self.current_wave:",
        "if exclude_engine_index != self.engine_index and new_wave > self.current_wave:",
        "ordering: START_DP_WAVE of the current wave is dropped (off by one)",
    ),
    Mutant(
        "dp-pause",
        "wave-skips-one",
        "impl/dp_pause/engine.py",
        "self.current_wave += 1",
        "self.current_wave += 2",
        "the wave counter advances by two at a wave's end (off by one)",
    ),
    Mutant(
        "dp-pause",
        "vote-kept-after-consensus",
        "impl/dp_pause/engine.py",
        "self.pending_pause = False",
        "self.pending_pause = True",
        "consensus clears the pause vote (the vote stays pending)",
    ),
    # -------------------------------------------------------------------------------- pp-broadcast
    Mutant(
        "pp-broadcast",
        "never-skip",
        "impl/pp_broadcast/worker.py",
        "return every_row_discarded",
        "return False",
        "the fix's core: post-fix skips the broadcast on an all-chunked-prefill step",
        options=DECODE_GAP,
    ),
    Mutant(
        "pp-broadcast",
        "skip-on-any-discard",
        "impl/pp_broadcast/worker.py",
        "every_row_discarded = all(step.discard)  # _is_all_reqs_chunked_prefill()",
        "every_row_discarded = any(step.discard)  # _is_all_reqs_chunked_prefill()",
        "the skip consensus: skip when any row is discarded, not every row",
        options=DECODE_GAP,
    ),
    Mutant(
        "pp-broadcast",
        "one-more-in-flight",
        "impl/pp_broadcast/engine.py",
        "if waiting and self.scheduled - self.processed < self.size:",
        "if waiting and self.scheduled - self.processed <= self.size:",
        "ordering: the engine keeps at most pp_size steps in flight (off by one)",
        options=DECODE_GAP,
    ),
    Mutant(
        "pp-broadcast",
        "map-keeps-discarded",
        "impl/pp_broadcast/worker.py",
        "self.prev_map = {q: row for row, (q, _, _) in enumerate(step.rows) if kept[row]}",
        "self.prev_map = {q: row for row, (q, _, _) in enumerate(step.rows)}",
        "prev_req_id_to_index maps only rows whose sample is kept",
        options=DECODE_GAP,
    ),
    Mutant(
        "pp-broadcast",
        "placeholder-per-row",
        "impl/pp_broadcast/worker.py",
        "self.output_length[q] += kept[row]  # the -1 placeholder",
        "self.output_length[q] += 1  # the -1 placeholder",
        "a placeholder only for a kept row (counter)",
        options=DECODE_GAP,
    ),
    Mutant(
        "pp-broadcast",
        "gap-of-request-0-free",
        "impl/pp_broadcast/engine.py",
        "if leave_out >= 0:",
        "if leave_out > 0:",
        "leaving request 0 out uses up a gap (index off by one)",
        options=DECODE_GAP,
    ),
    # ----------------------------------------------------------------------------- computed-tokens
    Mutant(
        "computed-tokens",
        "no-refresh",
        "impl/computed_tokens/runner.py",
        "if self.fixed:  # v0.22.0 update_requests (model_runner.py:736)",
        "if False:  # v0.22.0 update_requests (model_runner.py:736)",
        "the fix's core: post-fix refreshes the CPU mirror from the scheduler",
    ),
    Mutant(
        "computed-tokens",
        "refresh-new-only",
        "impl/computed_tokens/runner.py",
        "if row.scheduled > 0:",
        "if row.scheduled > 0 and row.new:",
        "the refresh covers every scheduled row, not only new ones",
    ),
    Mutant(
        "computed-tokens",
        "rejected-off-by-one",
        "impl/computed_tokens/scheduler.py",
        "rejected = row.drafts - (sampled - 1) if row.drafts > 0 and sampled > 0 else 0",
        "rejected = row.drafts - sampled if row.drafts > 0 and sampled > 0 else 0",
        "rejected drafts: drafts minus accepted (the bonus token counted; off by one)",
    ),
    Mutant(
        "computed-tokens",
        "placeholders-without-bonus",
        "impl/computed_tokens/scheduler.py",
        "request.num_output_placeholders += 1 + drafts[index]",
        "request.num_output_placeholders += drafts[index]",
        "a step's placeholders: one per draft plus the bonus token (counter)",
    ),
    Mutant(
        "computed-tokens",
        "context-off-by-one",
        "impl/computed_tokens/scheduler.py",
        "wanted = min(wanted, budget, bounds.max_model_len - 1 - computed)",
        "wanted = min(wanted, budget, bounds.max_model_len - computed)",
        "the scheduled tokens stay below max_model_len (off by one)",
        options=("--instance", "context-limit"),  # the seed's max_model_len never binds
    ),
    Mutant(
        "computed-tokens",
        "device-ignores-rejections",
        "impl/computed_tokens/runner.py",
        "self.num_computed_tokens += (scheduled - torch.tensor(rejected, dtype=torch.int64)).to(self.device)",
        "self.num_computed_tokens += scheduled.to(self.device)",
        "post_update subtracts the rejected drafts on the device",
    ),
    # -------------------------------------------------------------------------- async-placeholders
    Mutant(
        "async-placeholders",
        "forward-scan",
        "impl/async_placeholders/scans.py",
        "POST_FIX: backward_first_placeholder,",
        "POST_FIX: forward_first_placeholder,",
        "the fix's core: post-fix finds the -1 run by a backward scan",
        options=SPEC_DECODE,
    ),
    Mutant(
        "async-placeholders",
        "scan-reads-one-more",
        "impl/async_placeholders/scans.py",
        "reads = 0",
        "reads = 1",
        "the backward scan's element count (off by one)",
        options=SPEC_DECODE,
    ),
    Mutant(
        "async-placeholders",
        "scan-stops-at-one",
        "impl/async_placeholders/scans.py",
        "while first > 0:",
        "while first > 1:",
        "the backward scan may reach the list's first element (index off by one)",
        options=SPEC_DECODE,
    ),
    Mutant(
        "async-placeholders",
        "valid-ids-one-more",
        "impl/async_placeholders/scans.py",
        "return len(row) if row[-1] != PLACEHOLDER else row.index(PLACEHOLDER)",
        "return len(row) if row[-1] != PLACEHOLDER else row.index(PLACEHOLDER) + 1",
        "a sampled row's valid ids end before its first -1 (off by one)",
        options=SPEC_DECODE,
    ),
    Mutant(
        "async-placeholders",
        "repair-unbounded",
        "impl/async_placeholders/scans.py",
        "written = min(valid_count(row), run)",
        "written = valid_count(row)",
        "the repair writes at most as many ids as the -1 run is long",
        equivalent="the scheduler adds 1 + drafts placeholders per producing step and the sampled row has at "
        "most 1 + drafts valid ids, so the -1 run is never shorter than the valid ids and the min never binds "
        "(test-runtime's post-fix runs keep the suffix invariant I1)",
        options=SPEC_DECODE,
    ),
    Mutant(
        "async-placeholders",
        "placeholders-without-drafts",
        "impl/async_placeholders/scheduler.py",
        "request.placeholders += 1 + drafts",
        "request.placeholders += 1",
        "a producing step adds one placeholder per draft plus one (counter)",
        options=SPEC_DECODE,
    ),
    Mutant(
        "async-placeholders",
        "accepted-placeholder-kept",
        "impl/async_placeholders/scheduler.py",
        "request.placeholders -= accepted + 1",
        "request.placeholders -= accepted",
        "an output replaces its placeholder: accepted drafts plus the bonus token (off by one)",
        options=SPEC_DECODE,
    ),
    # -------------------------------------------------------------------------------- cudagraph-pp
    Mutant(
        "cudagraph-pp",
        "no-copy-in",
        "impl/cudagraph_pp/worker.py",
        "if self.copies_in:  # every key of the persistent buffer (a missing key is vLLM's KeyError)",
        "if False:  # every key of the persistent buffer (a missing key is vLLM's KeyError)",
        "the fix's core: post-fix copies the received tensors into the persistent buffer",
    ),
    Mutant(
        "cudagraph-pp",
        "no-persistent-buffer",
        "impl/cudagraph_pp/worker.py",
        "self.persistent_buffer = self.variant not in (PRE_FIX, NO_PERSISTENT_BUFFER)",
        "self.persistent_buffer = self.variant in (NO_PERSISTENT_BUFFER,)",
        "the fix's other half: post-fix captures on a persistent buffer",
    ),
    Mutant(
        "cudagraph-pp",
        "bucket-above",
        "impl/cudagraph_pp/descriptors.py",
        "bucket = next((size for size in sorted(self.candidates) if size >= num_tokens), None)",
        "bucket = next((size for size in sorted(self.candidates) if size > num_tokens), None)",
        "dispatch: the smallest capture size that holds the batch (off by one)",
    ),
    Mutant(
        "cudagraph-pp",
        "fewer-requests-fit",
        "impl/cudagraph_pp/descriptors.py",
        "and (descriptor.num_reqs is None or descriptor.num_reqs >= num_reqs)",
        "and (descriptor.num_reqs is None or descriptor.num_reqs > num_reqs)",
        "dispatch: a FULL graph serves a batch of up to its request count (off by one)",
    ),
    Mutant(
        "cudagraph-pp",
        "copy-one-row-short",
        "impl/cudagraph_pp/worker.py",
        "tensor[:rows].copy_(received[key][:rows])",
        "tensor[: rows - 1].copy_(received[key][: rows - 1])",
        "the copy-in covers every row the graph reads (index off by one)",
    ),
    Mutant(
        "cudagraph-pp",
        "capture-requests-unbounded",
        "impl/cudagraph_pp/descriptors.py",
        'BatchDescriptor(mixed_mode, size, min(size, max_num_reqs) if mixed_mode == "FULL" else None)',
        'BatchDescriptor(mixed_mode, size, size if mixed_mode == "FULL" else None)',
        "a FULL capture's request count is bounded by max_num_seqs",
    ),
    # ------------------------------------------------------------------------------ pd-kv-transfer
    Mutant(
        "pd-kv-transfer",
        "register-cleanup-read",
        "impl/pd_kv_transfer/decode.py",
        "if self.variant == PRE_FIX:",
        "if True:",
        "the fix's core: v0.30.0 registers no _recving_metadata for an aborted request's notify-only read",
        options=("--instance", "abort-failed-cleanup"),
    ),
    Mutant(
        "pd-kv-transfer",
        "free-under-read",
        "impl/pd_kv_transfer/decode.py",
        "if status == REMOTE:  # delay_free_blocks: the read may still touch the blocks",
        "if False:",
        "D keeps the blocks of a request aborted in WAITING_FOR_REMOTE_KVS (delay_free_blocks)",
        options=("--instance", "abort"),
    ),
    Mutant(
        "pd-kv-transfer",
        "failed-read-unreported",
        "impl/pd_kv_transfer/decode.py",
        "self.finished_recving[request] += 1  # done or failed: reported either way",
        "self.finished_recving[request] += int(ok)",
        "a failed read is reported in finished_recving too",
        options=("--instance", "abort-failed-cleanup"),
    ),
    Mutant(
        "pd-kv-transfer",
        "honour-untracked-notification",
        "impl/pd_kv_transfer/prefill.py",
        "if request in self.sending:",
        "if True:",
        "_get_new_notifs drops a notification for a request it no longer tracks",
        options=("--instance", "duplicated-notification"),
    ),
    Mutant(
        "pd-kv-transfer",
        "no-delay-free",
        "impl/pd_kv_transfer/prefill.py",
        "self.requests[request] = HELD",
        "self.requests[request] = HELD; self.pool.release(request)",
        "P keeps a finished prefill's blocks for D's read (delay_free_blocks)",
    ),
    Mutant(
        "pd-kv-transfer",
        "finished-sending-frees-nothing",
        "impl/pd_kv_transfer/prefill.py",
        "present = self.requests.get(request) == HELD",
        "present = False",
        "finished_sending frees the held blocks",
    ),
)


def mutated_package(mutant: Mutant, folder: Path) -> Path:
    """A copy of the lockstep package under ``folder`` with ``mutant`` applied; ``folder`` (to put
    first on PYTHONPATH)."""
    target = folder / "lockstep"
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__"))
    path = target / mutant.file
    if not path.is_file():
        raise MutantError(f"mutant {mutant.name}: no file lockstep/{mutant.file}")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    found = [number for number, line in enumerate(lines) if line.strip() == mutant.original]
    if len(found) != 1:
        raise MutantError(
            f"mutant {mutant.name}: lockstep/{mutant.file} has the line {mutant.original!r} "
            f"{len(found)} times (it must be exactly once)"
        )
    line = lines[found[0]]
    indentation = line[: len(line) - len(line.lstrip())]
    lines[found[0]] = indentation + mutant.replacement + "\n"
    path.write_text("".join(lines), encoding="utf-8")
    return folder


def run_test_runtime(
    mutant: Mutant | None, folder: Path, *options: str, timeout: float = 1800, hang_timeout: float = 3
) -> tuple[int, dict[str, Any], str]:
    """``lockstep test-runtime PROTOCOL --variant post-fix --fail-fast --json`` with the mutant's
    package first on PYTHONPATH (None: the real package); exit code, JSON object, stderr. A run
    that must not be killed (the control) takes a generous ``hang_timeout``: on a loaded machine a
    short one calls a slow collective a hang."""
    protocol = mutant.protocol if mutant is not None else options[0]
    arguments = list(options[1:]) if mutant is None else [*mutant.options, *options]
    source = mutated_package(mutant, folder / "package") if mutant is not None else ROOT
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), str(ROOT)])}
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "lockstep",
            "test-runtime",
            protocol,
            "--variant",
            "post-fix",
            "--fail-fast",
            "--hang-timeout",
            str(hang_timeout),
            "--trace-dir",
            str(folder / "runs"),
            "--json",
            *arguments,
        ],
        capture_output=True,
        text=True,
        env=environment,
        cwd=folder,
        timeout=timeout,
        check=False,
    )
    result = json.loads(completed.stdout) if completed.stdout.strip() else {}
    return completed.returncode, result, completed.stderr


__all__ = ["MUTANTS", "Mutant", "MutantError", "mutated_package", "run_test_runtime"]
