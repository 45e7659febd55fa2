"""Figures 21 and 22: what a decode step costs outside the model.

21. ``step_primitives``: the primitives (graph nodes) a decode step runs outside the
    forward pass, ours and mlx-lm's, counted from the graph MLX would run (its
    ``export_to_dot``) on any backend: the logits are evaluated first, so only what
    follows them counts — our chain, draw, inspection pack and the sampler state's
    update; mlx-lm's logits processors, log-softmax and sampler. Compiled functions are
    counted after MLX's fusion (one ``Compiled…`` node per fused element-wise kernel).
    ``kernels`` leaves out the primitives that are views (reshape, slice, ...), which
    launch nothing, and counts a concatenation once per input (MLX's Metal and CUDA
    backends copy each input with a kernel of its own: counted once before 2026-11-28),
    and a primitive once however often ``export_to_dot`` writes it (mlx-lm's batched graph
    writes shared ones again: 316 kernels as written before, 169 distinct now). On a GPU a
    step costs its kernel count, not its arithmetic: ``ours_gpu_forms`` is our step
    traced as a GPU traces it (``engine.stages.base.gpu_forms``: plain exp, the
    statistics summed as lanes, the Gumbel draw compiled), counted here.
26. ``host_step``: the step with almost no arithmetic in it (1 layer, hidden 16, V = 2,048),
    decoded by us and by mlx-lm: what is left is each side's host work and the dispatch of
    its kernels, the part of a step a GPU cannot hide. The H100 of 2026-11-27 read figure
    22 at 0.399 where this CPU read it at 0.72–0.92, and this figure at 0.476 here: it is
    the CPU's proxy of the GPU's ratio.
22. ``tiny_decode``: a CPU proxy of the GPU step. A random llama of 2 layers and hidden
    64 with the default model's real vocabulary (V = 49,152): its forward pass is cheap,
    so the work around it shows, as it does on a GPU. Decoded greedily with ten
    candidates by us and by ``mlx_lm.stream_generate`` (the same span on both sides).
"""

from __future__ import annotations

import io
import re
import tempfile
from collections import Counter
from pathlib import Path

import mlx.core as mx

from bench.chain_cost import CLASSIC, EVERY_STAGE
from bench.common import PROMPT, no_eos, peer_sampling, synthetic_model
from engine.api.params import SamplingParams
from engine.models.load import LoadedModel
from engine.runtime.scheduler import Scheduler
from engine.stages.base import gpu_forms

VIEWS = frozenset(
    {
        "Reshape",
        "Squeeze",
        "ExpandDims",
        "Broadcast",
        "Slice",
        "Transpose",
        "StopGradient",
        "AsStrided",
        "Flatten",
        "View",
    }
)
"""Primitives that make a view of their input and launch no kernel (``View``, a reinterpreting
of the bits, shares its input's buffer where the sizes of the types agree)."""

CHAINS = {"greedy": {}, "classic": CLASSIC, "every": EVERY_STAGE}
GOALS = {"ours_at_most": 20, "tiny_ratio_at_least": 0.9, "host_ratio_at_least": 0.9}


def tiny_model() -> LoadedModel:
    """2 layers, hidden 64, the default model's tokenizer and vocabulary (V = 49,152)."""
    return synthetic_model(Path(tempfile.gettempdir()) / "logitscope-bench-tiny64", hidden=64, layers=2)


def count_nodes(*outputs: mx.array) -> dict:
    """The primitives in the graph that computes ``outputs`` from what is already evaluated,
    and the kernels they launch: a view none, a concatenation one per input (MLX's Metal
    and CUDA backends copy each input with a kernel of its own), any other one."""
    out = io.StringIO()
    mx.export_to_dot(out, *outputs)
    dot = out.getvalue()
    found = re.findall(r'\{ (\d+) \[label ="([^"]+)", shape=rectangle\]; \}', dot)
    # A primitive reached along several paths is written (with its inputs) once for each:
    # counted once (mlx-lm's batched graph: 549 written, 326 distinct).
    nodes, written = dict(found), Counter(node for node, _ in found)
    inputs = Counter(target for _, target in re.findall(r'"?(\w+)"? -> "?(\w+)"?', dot) if target in nodes)
    kernels = 0
    for node, label in nodes.items():
        kind = label.split()[0]
        if kind not in VIEWS:
            kernels += inputs[node] // written[node] if kind == "Concatenate" else 1
    return {"primitives": len(nodes), "kernels": kernels}


def _state_arrays(sampling) -> list[mx.array]:
    """The device arrays a step's ``accept`` leaves in the sampler's state."""
    found: list[mx.array] = []

    def walk(value, depth: int) -> None:
        if isinstance(value, mx.array):
            found.append(value)
        elif depth < 3 and hasattr(value, "__dict__"):
            for item in vars(value).values():
                walk(item, depth + 1)
        elif depth < 3 and isinstance(value, list | tuple):
            for item in value:
                walk(item, depth + 1)

    for state in sampling.states.values():
        walk(state, 0)
    return found


def ours(loaded: LoadedModel, batch: int, settings: dict) -> dict:
    """Our step's graph after the logits, at ``batch`` rows sharing ``settings``."""
    scheduler = Scheduler(loaded, max_batch_size=batch, prefill_chunk=512, sample_ahead=False)
    prompt = loaded.tokenizer.encode(PROMPT)
    for i in range(batch):
        params = SamplingParams(seed=i, max_tokens=10_000, top_logprobs=10, logit_bias=no_eos(loaded), **settings)
        scheduler.insert(prompt[i:], params)
    while len(scheduler._active) < batch:
        scheduler.step()
    scheduler.step()
    requests, sampling = scheduler._active, scheduler._sampling
    logits = scheduler.model(mx.array([[r.generated[-1]] for r in requests]), cache=scheduler._batch)[:, -1, :]
    mx.eval(logits)
    mx.eval(*_state_arrays(sampling))
    sampled = sampling.sample(logits, [r.next_index for r in requests])
    # The step with the state it updated itself (``Stage.update``), then the update made
    # after it for the token just drawn (a scatter; its graph runs at the next step).
    outputs = [sampled.tokens, sampled.packed, *_state_arrays(sampling)]
    step = count_nodes(*outputs)
    mx.eval(*outputs)
    sampling.accept([int(t) for t in sampled.tokens.tolist()], [r.leaving_token() for r in requests])
    update = count_nodes(*_state_arrays(sampling))
    return {key: step[key] + update[key] for key in step}


def peer(loaded: LoadedModel, batch: int, settings: dict) -> dict:
    """mlx-lm's step after the logits: ``generate_step`` at batch 1, ``BatchGenerator._step``
    (a processor chain and a sampler per row) at larger batches."""
    p = SamplingParams(max_tokens=10_000, logit_bias=no_eos(loaded), **settings)
    sampler, processors = peer_sampling(p)
    logits = mx.random.normal((batch, loaded.vocab_size))
    context = mx.array(loaded.tokenizer.encode(PROMPT))
    mx.eval(logits, context)
    rows = []
    for row in range(batch):
        part = logits[row : row + 1]
        for processor in processors:
            part = processor(context, part)
        rows.append(part)
    processed = rows[0] if batch == 1 else mx.concatenate(rows, axis=0)
    logprobs = processed - mx.logsumexp(processed, axis=-1, keepdims=True)
    tokens = mx.concatenate([sampler(logprobs[r : r + 1]) for r in range(batch)]) if batch > 1 else sampler(logprobs)
    return count_nodes(tokens, logprobs)


def step_primitives(smoke: bool = False) -> dict:
    loaded = tiny_model()
    out: dict = {}
    for chain, settings in CHAINS.items():
        for batch in (1,) if smoke else (1, 8):
            with gpu_forms():
                on_gpu = ours(loaded, batch, settings)
            out[f"{chain}, batch {batch}"] = {
                "ours": ours(loaded, batch, settings),
                "ours_gpu_forms": on_gpu,
                "mlx_lm": peer(loaded, batch, settings),
            }
    out["goal"] = {"ours_kernels_at_most": GOALS["ours_at_most"]}
    return out


def tiny_decode(smoke: bool = False) -> dict:
    """Figure 1's measurement (``bench.throughput.decode_batch1``) on the tiny llama."""
    from bench.throughput import decode_batch1

    tokens, repeats = (8, 1) if smoke else (200, 11)
    result = decode_batch1(tiny_model(), tokens=tokens, repeats=repeats)
    result["goal"] = {"ratio_at_least": GOALS["tiny_ratio_at_least"]}
    return result


def host_model() -> LoadedModel:
    """1 layer, hidden 16, the default model's tokenizer cut to its first 2,048 tokens."""
    return synthetic_model(Path(tempfile.gettempdir()) / "logitscope-bench-host16", hidden=16, layers=1, vocab=2048)


def host_step(smoke: bool = False) -> dict:
    """Figure 26: figure 1's measurement (``bench.throughput.decode_batch1``) on
    :func:`host_model`, prompt ids 5 to 39 (all inside its vocabulary)."""
    from bench.throughput import decode_batch1

    tokens, repeats = (8, 1) if smoke else (300, 11)
    result = decode_batch1(host_model(), tokens=tokens, repeats=repeats, prompt=list(range(5, 40)))
    result["ours_ms_per_step"] = round(1000 / result["ours_tps"], 3)
    result["mlx_lm_ms_per_step"] = round(1000 / result["mlx_lm_tps"], 3)
    result["goal"] = {"ratio_at_least": GOALS["host_ratio_at_least"]}
    return result
