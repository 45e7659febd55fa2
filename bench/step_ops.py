"""What each piece of a decode step costs on this device, alone: the step after the logits
(ours and mlx-lm's), the primitives it is made of, and how much of a pipelined step is the
host's.

    python -m bench.step_ops [--vocab 49152] [--repeats 200]

Written for the GPU machine, whose time is short and whose profilers may be missing
(``bench/gpu_run.sh`` runs it): the H100 of 2026-11-27 put a constant of about 1.4 ms a
token around our forward pass that the CPU does not show, and these numbers say whether it
is the host (building and queuing the step) or the device (a primitive slow there). Each
case is evaluated alone ``repeats`` times; ``sync`` is one trivial kernel's round trip,
the floor under every other case. Runs on any backend (a CPU run checks the script).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import mlx.core as mx

from bench.common import median
from engine.api.params import SamplingParams
from engine.sampling.batch import SamplingBatch
from engine.stages.vocabulary import Vocabulary


def _timed(make: Callable[[], object], repeats: int) -> float:
    """Median µs of ``mx.eval(make())``, after three warm calls (first use compiles)."""
    for _ in range(3):
        mx.eval(make())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        mx.eval(make())
        times.append(time.perf_counter() - start)
    return round(1e6 * median(times), 1)


def _ours(vocab: int, banned: bool = True) -> SamplingBatch:
    """Figure 1's row: greedy, ten candidates, one token banned by a logit bias (``banned``;
    without it the step inspects one distribution, not two)."""
    params = SamplingParams(max_tokens=10_000, top_logprobs=10, logit_bias={0: -100.0} if banned else {})
    return SamplingBatch.of(Vocabulary(vocab), params, [1, 2, 3])


def _peer_step(logits: mx.array, bias_index: mx.array, bias_value: mx.array) -> tuple[mx.array, mx.array]:
    # mlx-lm's generate_step after the model with logit_bias: its processor, log-softmax, argmax.
    logits = logits.at[:, bias_index].add(bias_value)
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    return mx.argmax(logprobs, axis=-1), logprobs


def step_ops(vocab: int = 49_152, repeats: int = 200) -> dict:
    logits = mx.random.normal((1, vocab))
    two = mx.random.normal((2, 1, vocab))
    counts = mx.zeros((1, vocab), mx.int32)
    bias_index, bias_value = mx.array([0]), mx.array([-100.0])
    mx.eval(logits, two, counts, bias_index, bias_value)
    sampling = _ours(vocab)
    blocks = two.reshape(2, 1, vocab // 128, 128)
    pieces = [mx.random.normal((1, n)) for n in (1, 8, 8, 8, 8, 21, 21, 42)]
    mx.eval(blocks, *pieces)

    unbanned = _ours(vocab, banned=False)

    def ours(batch: SamplingBatch = sampling):
        sampled = batch.sample(logits, [0])
        return sampled.tokens, sampled.packed

    cases: dict[str, Callable[[], object]] = {
        "sync": lambda: logits + 1,
        "ours_step": ours,
        "ours_step_no_bias": lambda: ours(unbanned),
        "mlx_lm_step": lambda: _peer_step(logits, bias_index, bias_value),
        "max_over_v": lambda: mx.max(two, axis=-1),
        "max_by_blocks": lambda: mx.max(blocks, axis=-1),
        "sum_over_v": lambda: mx.sum(two, axis=-1),
        "exp_over_v": lambda: mx.exp(two),
        "logsumexp_over_v": lambda: mx.logsumexp(logits, axis=-1),
        "argmax_over_v": lambda: mx.argmax(logits, axis=-1),
        "argpartition_over_v": lambda: mx.argpartition(logits, kth=vocab - 10, axis=-1),
        "argpartition_over_blocks": lambda: mx.argpartition(mx.max(blocks, axis=-1), kth=vocab // 128 - 10, axis=-1),
        "gather_21": lambda: mx.take_along_axis(two, mx.zeros((2, 1, 21), mx.int32), axis=-1),
        "concatenate_8_pieces": lambda: mx.concatenate(pieces, axis=1),
        "scatter_add_1": lambda: counts.at[mx.array([0]), mx.array([5])].add(mx.array([1], mx.int32)),
        "stack_2_over_v": lambda: mx.stack([logits, logits + 1]),
    }
    out: dict = {"device": str(mx.default_device()), "vocab": vocab, "repeats": repeats}
    out["us"] = {name: _timed(make, repeats) for name, make in cases.items()}
    out["pipelined"] = _pipelined(sampling, logits, repeats)
    return out


def _pipelined(sampling: SamplingBatch, logits: mx.array, repeats: int) -> dict:
    """Our step queued one ahead as the scheduler queues it: the host's time to build and
    queue a step (``queue_us``) against the wait for the one before (``wait_us``)."""
    queue, wait = [], []
    previous = None
    for i in range(repeats + 3):
        start = time.perf_counter()
        sampled = sampling.sample(logits, [i])
        mx.async_eval(sampled.tokens, sampled.packed)
        queued = time.perf_counter()
        if previous is not None:
            mx.eval(previous)
        done = time.perf_counter()
        previous = sampled.packed
        if i >= 3:
            queue.append(queued - start)
            wait.append(done - queued)
    return {"queue_us": round(1e6 * median(queue), 1), "wait_us": round(1e6 * median(wait), 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab", type=int, default=49_152)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    print(json.dumps(step_ops(args.vocab, args.repeats)))


if __name__ == "__main__":
    main()
