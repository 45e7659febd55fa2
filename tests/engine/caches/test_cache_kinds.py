"""Every cache kind mlx-lm batches, on tiny random-weight models of six architectures:
greedy parity with mlx-lm, batch invariance, branches equal cold runs, prefix reuse."""

from pathlib import Path

import pytest
from mlx_lm import stream_generate
from mlx_lm.models.cache import QuantizedKVCache
from mlx_lm.sample_utils import make_logits_processors

from engine.api.errors import EngineError
from engine.api.events import Finished, TokenStep
from engine.api.params import SamplingParams
from engine.models.load import load
from engine.runtime.scheduler import Scheduler
from tests.support.tiny_archs import CONFIGS, WINDOW, write_tiny_arch

ARCHS = list(CONFIGS)
KINDS = {
    "llama": ["KVCache"],
    "qwen2": ["KVCache"],
    "qwen3": ["KVCache"],
    "gemma3_text": ["KVCache", "RotatingKVCache"],
    "gpt_oss": ["KVCache", "RotatingKVCache"],
    "qwen3_next": ["ArraysCache", "KVCache"],
    "lfm2": ["ArraysCache", "KVCache"],
}
STEPS = 32
PROMPT = [5, 6, 7, 8, 9, 10, 11, 12, 40, 41, 42]
GREEDY = SamplingParams(max_tokens=STEPS, top_logprobs=2)
SEEDED = SamplingParams(temperature=1.0, top_p=0.95, seed=7, max_tokens=STEPS, top_logprobs=2)


@pytest.fixture(scope="module", params=ARCHS)
def arch(request, tmp_path_factory):
    folder = write_tiny_arch(tmp_path_factory.mktemp(request.param) / request.param, request.param)
    return request.param, load(str(folder))


def no_eos(loaded, params):
    """Random tiny models may draw their EOS early; forbid it where a test needs length."""
    return params.with_changes(logit_bias={t: -100.0 for t in loaded.eos_token_ids})


def run(scheduler):
    events = []
    while scheduler.has_work():
        events += scheduler.step()
    return events


def tokens(events, rid):
    return [e.token_id for e in events if isinstance(e, TokenStep) and e.request_id == rid]


def finished(events, rid) -> Finished:
    return next(e for e in events if isinstance(e, Finished) and e.request_id == rid)


def alone(loaded, prompt, params, **kwargs):
    scheduler = Scheduler(loaded, **kwargs)
    rid = scheduler.insert(prompt, params)
    events = run(scheduler)
    return tokens(events, rid), finished(events, rid)


def test_cache_kinds_and_greedy_parity_with_mlx_lm(arch):
    name, loaded = arch
    scheduler = Scheduler(loaded, prefill_chunk=4)
    assert scheduler.cache_kinds == KINDS[name]
    greedy = no_eos(loaded, GREEDY)
    ours, done = alone(loaded, PROMPT, greedy, prefill_chunk=4)
    # The same EOS ban through mlx-lm's own logit-bias processor, so both run STEPS tokens.
    processors = make_logits_processors(logit_bias=dict(greedy.logit_bias))
    stream = stream_generate(loaded.model, loaded.tokenizer, PROMPT, max_tokens=STEPS, logits_processors=processors)
    theirs = [r.token for r in stream]
    assert len(ours) == STEPS
    assert ours == theirs
    if "RotatingKVCache" in KINDS[name]:
        assert len(PROMPT) + len(ours) > 2 * WINDOW  # the window wrapped
    assert done.prefilled_tokens == len(PROMPT)


def test_three_requests_in_a_batch_equal_each_alone(arch):
    _, loaded = arch
    prompts = [PROMPT, PROMPT[:5], [9, 8, 7, 6, 5, 4, 3, 2, 1, 30, 31, 32, 33, 34, 35, 36, 37, 38]]
    params = [no_eos(loaded, p) for p in (GREEDY, SEEDED, GREEDY.with_changes(repetition_penalty=1.3))]
    scheduler = Scheduler(loaded, prefill_chunk=8)
    ids = [scheduler.insert(p, q) for p, q in zip(prompts, params, strict=True)]
    events = run(scheduler)
    for rid, prompt, p in zip(ids, prompts, params, strict=True):
        assert tokens(events, rid) == alone(loaded, prompt, p, prefill_chunk=8)[0]


def test_seeded_request_is_batch_invariant(arch):
    _, loaded = arch
    solo, _ = alone(loaded, PROMPT, SEEDED)
    scheduler = Scheduler(loaded)
    others = [scheduler.insert(PROMPT[i:], SEEDED.with_changes(seed=100 + i)) for i in range(1, 3)]
    mine = scheduler.insert(PROMPT, SEEDED)
    events = run(scheduler)
    assert tokens(events, mine) == solo
    assert all(tokens(events, o) for o in others)


def test_branch_equals_a_cold_run_of_the_same_tokens(arch):
    name, loaded = arch
    greedy = no_eos(loaded, GREEDY)
    scheduler = Scheduler(loaded, prefill_chunk=8)
    rid = scheduler.insert(PROMPT, greedy)
    original = tokens(run(scheduler), rid)
    position = 20
    forced = (original[position] + 1) % loaded.vocab_size
    branch = scheduler.branch(rid, position, forced)
    events = run(scheduler)
    branched = tokens(events, branch)
    cold_prompt = PROMPT + original[:position] + [forced]
    cold, _ = alone(loaded, cold_prompt, greedy.with_changes(max_tokens=STEPS - position - 1), prefill_chunk=8)
    assert branched[0] == forced
    assert branched[1:] == cold
    cost = finished(events, branch).prefilled_tokens
    if KINDS[name] == ["KVCache"]:
        assert cost == 1  # cut back to the branch point: only the last token is run again
    else:
        # Restored from the prompt-end checkpoint: the output before the branch is run again.
        assert cost == position
    assert cost < len(cold_prompt)


def test_next_turn_reuses_the_prefix(arch):
    _, loaded = arch
    greedy = no_eos(loaded, GREEDY)
    scheduler = Scheduler(loaded, prefill_chunk=8)
    rid = scheduler.insert(PROMPT, greedy)
    first = tokens(run(scheduler), rid)
    turn2 = PROMPT + first + [50, 51, 52, 53]
    rid2 = scheduler.insert(turn2, greedy.with_changes(max_tokens=8))
    events = run(scheduler)
    done = finished(events, rid2)
    assert done.prefilled_tokens <= 5  # the new user tokens (+ the reply's last token)
    cold, _ = alone(loaded, turn2, greedy.with_changes(max_tokens=8))
    assert tokens(events, rid2) == cold


def test_a_cache_mlx_lm_cannot_batch_is_refused_at_load(tiny):
    class Quantized:
        def __init__(self, model):
            self.model = model

        def make_cache(self):
            return [QuantizedKVCache() for _ in self.model.layers]

        def __getattr__(self, name):
            return getattr(self.model, name)

    wrapped = type(tiny)(**{**tiny.__dict__, "model": Quantized(tiny.model)})
    with pytest.raises(EngineError, match="QuantizedKVCache caches, which mlx-lm cannot batch"):
        Scheduler(wrapped)


def test_tiny_arch_folders_are_real_mlx_lm_folders(tmp_path: Path):
    """mlx-lm's own loader (not the engine's) reads the folder: its architecture, its tokenizer,
    a forward pass over the whole vocabulary."""
    import json

    import mlx.core as mx
    import mlx_lm

    folder = write_tiny_arch(tmp_path / "g", "gemma3_text")
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    model, tokenizer = mlx_lm.load(str(folder))
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "gemma3_text" and model.model_type == "gemma3_text"
    prompt = tokenizer.encode("hello there")
    assert prompt
    logits = model(mx.array(prompt)[None])
    assert logits.shape == (1, len(prompt), config["vocab_size"])


def test_model_info_names_architecture_cache_kinds_and_quantization(tmp_path: Path):
    from app.views.about import about_text
    from engine.session.session import EngineSession

    session = EngineSession()
    info = session.load(str(write_tiny_arch(tmp_path / "lfm", "lfm2")))
    assert (info.architecture, info.cache_kinds, info.quantization) == ("lfm2", ("ArraysCache", "KVCache"), "float32")
    assert "lfm2 · ArraysCache, KVCache · float32" in about_text(info)


def _graph(*outputs) -> list[str]:
    import io
    import re

    import mlx.core as mx

    out = io.StringIO()
    mx.export_to_dot(out, *outputs)
    return sorted(re.findall(r'label ="([^"]+)", shape=rectangle', out.getvalue()))


def test_an_unpadded_batch_decodes_through_mlx_lms_own_graph(tiny):
    """Batch 1 (and rows of equal length) run the very graph of mlx-lm's plain ``KVCache``:
    an integer offset, no mask; a padded batch keeps its offset array."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    prompt = tiny.tokenizer.encode("The cat sat on the mat")
    scheduler = Scheduler(tiny, prefill_chunk=512, sample_ahead=False)
    no_eos = {t: -100.0 for t in tiny.eos_token_ids}
    scheduler.insert(prompt, SamplingParams(max_tokens=20, logit_bias=no_eos))
    while not scheduler._active:
        scheduler.step()
    scheduler.step()  # the merged cache grows its buffer at the first decode step (so does mlx-lm's at 256)
    token = mx.array([[scheduler._active[0].generated[-1]]])
    ours = _graph(scheduler.model(token, cache=scheduler._batch))
    for layer in scheduler._batch:
        layer.trim(1)  # building the graph fed the token
    cache = make_prompt_cache(tiny.model)
    mx.eval(tiny.model(mx.array([prompt]), cache=cache))
    assert ours == _graph(tiny.model(token, cache=cache))
    assert isinstance(scheduler._batch[0].offset, int)

    scheduler.insert(prompt[:3], SamplingParams(max_tokens=200, logit_bias=no_eos))  # a shorter row: padded
    while len(scheduler._active) < 2:
        scheduler.step()
    assert not isinstance(scheduler._batch[0].offset, int)
    assert scheduler._batch[0].offset.tolist() == [r.fed for r in scheduler._active]
    while len(scheduler._active) == 2:  # the first row ends: the other is alone and unpadded again
        scheduler.step()
    assert len(scheduler._active) == 1 and isinstance(scheduler._batch[0].offset, int)
    assert scheduler._batch[0].offset == scheduler._active[0].fed
