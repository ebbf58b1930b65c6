"""The CPU mirror of computed-tokens over a long MTP generation: v0.21.0's drift against v0.22.0's refresh.

Through the reference runtime's own code (``lockstep.impl.computed_tokens``: the torch-free
scheduler and one rank's ``ModelRunner`` with its ``RequestState`` tensors and the tiny
draft/target pair), driven in one thread in ``step_with_batch_queue``'s order with async
scheduling (batch queue of 2: the worker executes step N+1 after sampling N, the scheduler updates
from N after scheduling N+1), untraced. B requests (default 64) with a prompt of 16 tokens, MTP
k = 3 drafts, every acceptance count drawn uniformly from 0..k by the seeded choice source, each
request generating ``--tokens`` outputs (default 1000). Both variants see the same choices.

Per variant it reports the largest ``seq_lens_cpu_upper_bound - seq_lens`` over every row and step
(U3's slack; post-fix at most k, the drafts of the step in flight), ``max_seq_len`` against the
true longest sequence at the last step, and the mean wall time per step of ``update_states`` +
``prepare_inputs`` (the post-fix refresh is the extra work). Usage:
``python bench/runtime_computed_tokens.py [--batch 64] [--tokens 1000] [--drafts 3] [--seed 0]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections import deque

import torch

from lockstep.impl.choices import SeededChoices
from lockstep.impl.computed_tokens.runner import Executed, ModelRunner
from lockstep.impl.computed_tokens.scheduler import DONE, SCHEDULE, Bounds, Scheduler


def measure(variant: str, bounds: Bounds, seed: int) -> dict[str, float]:
    scheduler = Scheduler(bounds)
    runner = ModelRunner(variant, bounds, 0, torch.device("cpu"), seed)
    choices = SeededChoices(seed)
    executed: deque[Executed] = deque()  # executed, not yet sampled (at most one)
    outputs: deque[list[int]] = deque()  # sampled, not yet updated from
    slack = steps = 0
    prepare_seconds = 0.0
    last_max_seq_len = last_truth = 0

    def sample() -> None:
        step = executed.popleft()
        sampled, rejected, _, _ = runner.sample(step, lambda point, options: choices.choose("rank:0", point, options))
        runner.postprocess(step.step, rejected)
        outputs.append(sampled)

    while (move := scheduler.next_move()) != DONE:
        if move == SCHEDULE:
            step = scheduler.schedule()
            if executed:
                sample()
            started = time.perf_counter()
            runner.update_states(step)
            metadata, order, positions, requests, starts = runner.prepare_inputs(step)
            prepare_seconds += time.perf_counter() - started
            hidden = runner.forward(positions, requests, None)
            executed.append(Executed(step, order, starts, hidden))
            steps += 1
            rows = [index for index, real in enumerate(metadata.real) if real]
            slack = max([slack] + [metadata.upper[row] - metadata.seq_lens[row] for row in rows])
            last_max_seq_len, last_truth = metadata.max_seq_len, max(metadata.seq_lens)
        else:
            if not outputs:
                sample()
            scheduler.update_from_output(outputs.popleft())
    return {
        "steps": steps,
        "max_slack": slack,
        "max_seq_len": last_max_seq_len,
        "true_max": last_truth,
        "prepare_ms": 1000 * prepare_seconds / steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--drafts", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()
    torch.set_num_threads(1)
    prompt = 16
    bounds = Bounds(
        requests=arguments.batch,
        prefill_len=prompt,
        budget=arguments.batch * (arguments.drafts + 1) + prompt,
        drafts=arguments.drafts,
        max_tokens=arguments.tokens,
        max_model_len=prompt + arguments.tokens + arguments.drafts + 1,
        asynchronous=True,
        padded_rows=0,
        ranks=1,
    )
    print(
        f"computed-tokens mirror: B={arguments.batch}, k={arguments.drafts}, {arguments.tokens} outputs per request, "
        f"torch {torch.__version__}, {os.cpu_count()} cores, {platform.processor() or platform.machine()}"
    )
    for variant in ("pre-fix", "post-fix"):
        result = measure(variant, bounds, arguments.seed)
        print(
            f"{variant:9s} steps {result['steps']:5.0f}  max slack {result['max_slack']:6.0f}  "
            f"max_seq_len {result['max_seq_len']:6.0f} (true {result['true_max']:5.0f}, max_model_len "
            f"{bounds.max_model_len})  "
            f"update_states+prepare_inputs {result['prepare_ms']:.3f} ms/step"
        )


if __name__ == "__main__":
    main()
