"""A quantized KV cache (mlx-lm's kv_bits / kv_group_size / quantized_kv_start) as a setting
of the loaded model: the setting's checks, the batch cache against per-row quantization,
batch invariance, parity with mlx-lm's own generate_step, prefix reuse, branches, forks,
scoring, the refused cache kinds, and the CLI's flags (kld: the cost of 8 and 4 bits)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import ArraysCache, KVCache, make_prompt_cache

from engine.api.errors import EngineError
from engine.api.events import Finished, TokenStep
from engine.api.kv_quantization import KV_OFF, KVQuantization
from engine.api.params import SamplingParams
from engine.caches import batch as kv
from engine.caches.quantized import BatchQuantizedKVCache, QuantizedCache, layer_kinds, quantize_layer
from engine.models.load import load
from engine.runtime.scheduler import Scheduler
from engine.stages.vocabulary import Vocabulary
from tests.support.tiny_archs import write_tiny_arch

# Heads 64 wide (the tiny models' 16 are narrower than any group size): 2 query heads
# sharing 1 key/value head, so mlx-lm's quantized attention also takes its GQA path.
WIDE = {"hidden_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1}
PROMPT = [5, 6, 7, 8, 9, 10, 11, 12, 40, 41, 42]
TOL = 1e-5
GREEDY = SamplingParams(max_tokens=16, top_logprobs=4)
SEEDED = SamplingParams(temperature=1.0, top_p=0.95, seed=7, max_tokens=16, top_logprobs=4)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_tiny_arch(tmp_path_factory.mktemp("kvq") / "llama64", "llama", overrides=WIDE)


@pytest.fixture(scope="module")
def plain(folder):
    return load(str(folder))


def no_eos(loaded, params):
    return params.with_changes(logit_bias={t: -100.0 for t in loaded.eos_token_ids})


def run(scheduler, kinds: set | None = None):
    events = []
    while scheduler.has_work():
        events += scheduler.step()
        if kinds is not None and scheduler._batch:
            kinds.update(type(c).__name__ for c in scheduler._batch)
    return events


def steps(events, rid) -> list[TokenStep]:
    return [e for e in events if isinstance(e, TokenStep) and e.request_id == rid]


def finished(events, rid) -> Finished:
    return next(e for e in events if isinstance(e, Finished) and e.request_id == rid)


def alone(loaded, prompt, params, **kwargs) -> tuple[list[TokenStep], Finished]:
    scheduler = Scheduler(loaded, **kwargs)
    rid = scheduler.insert(prompt, params)
    events = run(scheduler)
    return steps(events, rid), finished(events, rid)


def assert_same(ours: list[TokenStep], theirs: list[TokenStep], tol: float = TOL) -> None:
    """The same tokens, and every candidate's raw logprob within ``tol``."""
    assert [s.token_id for s in ours] == [s.token_id for s in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert [c.token_id for c in a.top] == [c.token_id for c in b.top]
        np.testing.assert_allclose([c.raw_logprob for c in a.top], [c.raw_logprob for c in b.top], atol=tol)


# The setting ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"bits": 7}, "kv_bits must be one of 2, 3, 4, 5, 6, 8"),
        ({"bits": True}, "kv_bits"),
        ({"bits": "8"}, "kv_bits"),
        ({"bits": 0}, "kv_bits"),
        ({"bits": 8, "group_size": 48}, "kv_group_size must be one of 32, 64, 128"),
        ({"bits": 8, "group_size": 64.0}, "kv_group_size"),
        ({"bits": 8, "start": -1}, "quantized_kv_start must be an integer >= 0"),
        ({"start": 1.5}, "quantized_kv_start"),
    ],
)
def test_bad_settings_are_refused_by_name(values, needle):
    with pytest.raises(EngineError, match=needle):
        KVQuantization(**values)


def test_the_setting_in_words_and_mlx_lm_names():
    assert KV_OFF.describe() == "off" and not KV_OFF.enabled
    assert KVQuantization(8).describe() == "8-bit (group 64)"
    assert KVQuantization(4, 32, 1000).describe() == "4-bit (group 32) from token 1000"
    assert KVQuantization(4).to_dict() == {"kv_bits": 4, "kv_group_size": 64, "quantized_kv_start": 0}


# The batch cache ---------------------------------------------------------------------------


def _rows(lengths, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for n in lengths:
        c = KVCache()
        c.update_and_fetch(*(mx.array(rng.normal(size=(1, 2, n, 64)).astype(np.float32)) for _ in range(2)))
        rows.append(c)
    return rows


def _dense(parts, bits, group=64):
    return np.array(mx.dequantize(*parts, group_size=group, bits=bits))


def test_batch_cache_equals_per_row_quantization_through_merge_extend_filter_extract():
    bits = 4
    rows = _rows([3, 7, 5])
    quantized = [quantize_layer(r, 64, bits) for r in rows]
    batch = BatchQuantizedKVCache.merge(quantized[:2])
    batch.extend(BatchQuantizedKVCache.merge(quantized[2:]))
    # The same as quantizing mlx-lm's own left-padded BatchKVCache of the three rows.
    unquantized = kv.BatchCache.merge(rows[:2])
    unquantized.extend(kv.BatchCache.merge(rows[2:]))
    converted = BatchQuantizedKVCache.from_batch(unquantized, 64, bits)
    assert batch._idx == converted._idx == 7
    assert batch.left_padding.tolist() == converted.left_padding.tolist() == [4, 0, 2]
    np.testing.assert_array_equal(
        _dense(batch.keys_and_values()[0], bits), _dense(converted.keys_and_values()[0], bits)
    )
    for i in range(3):
        row = batch.extract(i)
        assert row.offset == rows[i].offset and isinstance(row, QuantizedCache)
        np.testing.assert_array_equal(_dense(row.keys, bits), _dense(quantized[i].keys, bits))
    # A decode step writes each row's new token quantized on its own.
    new = mx.array(np.random.default_rng(1).normal(size=(3, 2, 1, 64)).astype(np.float32))
    keys, _ = batch.update_and_fetch(new, new)
    np.testing.assert_array_equal(
        _dense(tuple(x[..., -1:, :] for x in keys), bits), _dense(mx.quantize(new, 64, bits), bits)
    )
    batch.filter(mx.array([0, 2], dtype=mx.int32))
    assert batch.left_padding.tolist() == [2, 0] and batch._idx == 6  # the padding both had is gone
    np.testing.assert_array_equal(_dense(batch.extract(1).keys, bits)[..., :5, :], _dense(quantized[2].keys, bits))
    assert batch.trim(2) == 2 and batch._idx == 4 and batch.offset.tolist() == [2, 4]
    assert batch.nbytes == sum(x.nbytes for x in (*batch.keys, *batch.values))
    mask = batch.make_mask(1, return_array=True)
    assert mask[0, 0, 0].tolist() == [False, False, True, True, True]  # row 0: padding, 2 tokens, the new one


def test_quantized_cache_cuts_back_only_to_when_it_converted():
    cache = quantize_layer(_rows([9])[0], 64, 8)
    assert cache.quantized_at == 9
    assert kv.can_cut(cache, 9, 9) and not kv.can_cut(cache, 5, 9)
    early = QuantizedCache(64, 8)  # quantized from the first token
    x = mx.array(np.random.default_rng(3).normal(size=(1, 2, 9, 64)).astype(np.float32))
    early.update_and_fetch(x, x)
    before = _dense(early.keys_and_values()[0], 8)
    assert kv.can_cut(early, 5, 9) and kv.cut_floor([early], 9) == 1
    cut = kv.cut(early, 5, 9)
    assert cut.offset == 5 and cut.keys[0].shape[2] == 5
    cut.update_and_fetch(*(mx.zeros((1, 2, 1, 64)),) * 2)
    np.testing.assert_array_equal(_dense(early.keys_and_values()[0], 8), before)  # the original is untouched


@pytest.mark.parametrize("bits", [5, 6])
def test_five_and_six_bits_at_head_width_128(bits):
    """mlx-lm's QuantizedKVCache sizes its first buffer wrongly for these (21 words for 20)."""
    cache = QuantizedCache(64, bits)
    x = mx.array(np.random.default_rng(2).normal(size=(1, 1, 3, 128)).astype(np.float32))
    keys, _ = cache.update_and_fetch(x, x)
    np.testing.assert_allclose(_dense(keys, bits), np.array(x), atol=0.2)


# One request: mlx-lm's generate_step is the reference -------------------------------------------


@pytest.mark.parametrize(("bits", "start"), [(8, 0), (4, 0), (4, 6), (4, 14)])
def test_a_request_equals_mlx_lm_generate_step_token_by_token(plain, bits, start):
    loaded = plain.with_kv(KVQuantization(bits, 64, start))
    # Chunks end where mlx-lm's do (the prompt but its last token, then the last token), so
    # the conversion happens after the same forward pass.
    kinds: set = set()
    scheduler = Scheduler(loaded, prefill_chunk=len(PROMPT) - 1)
    rid = scheduler.insert(PROMPT, no_eos(loaded, GREEDY))
    ours = steps(run(scheduler, kinds), rid)
    if start == 0:  # quantized from the first token: mlx-lm with caches quantized before it starts
        caches = [c.to_quantized(group_size=64, bits=bits) for c in make_prompt_cache(loaded.model)]
        stream = generate_step(mx.array(PROMPT), loaded.model, max_tokens=len(ours), prompt_cache=caches)
    else:
        stream = generate_step(
            mx.array(PROMPT),
            loaded.model,
            max_tokens=len(ours),
            kv_bits=bits,
            kv_group_size=64,
            quantized_kv_start=start,
        )
    reference = [(int(t), np.array(lp)) for t, lp in stream]
    assert [s.token_id for s in ours] == [t for t, _ in reference]
    for step, (_, logprobs) in zip(ours, reference, strict=True):
        np.testing.assert_allclose(
            [c.raw_logprob for c in step.top], logprobs[[c.token_id for c in step.top]], atol=TOL
        )
    # Decoding from token 14 on: unquantized until then, quantized after.
    assert kinds == ({"BatchCache", "BatchQuantizedKVCache"} if start == 14 else {"BatchQuantizedKVCache"})
    unquantized, _ = alone(plain, PROMPT, no_eos(plain, GREEDY), prefill_chunk=len(PROMPT) - 1)
    same_start = [c.raw_logprob for c in ours[0].top] == pytest.approx([c.raw_logprob for c in unquantized[0].top])
    assert same_start == (start == 14)


# Batches -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [8, 4])
def test_requests_in_a_batch_equal_each_alone(plain, bits):
    loaded = plain.with_kv(KVQuantization(bits))
    first = (PROMPT, no_eos(loaded, SEEDED))
    others = [
        (PROMPT[:3], no_eos(loaded, GREEDY)),
        ([9, 8, 7, 6, 5, 4, 3, 2, 1, 30, 31, 32, 33, 34, 35, 36, 37, 38], no_eos(loaded, SEEDED.with_changes(seed=3))),
        (PROMPT[2:], no_eos(loaded, GREEDY.with_changes(repetition_penalty=1.3, max_tokens=9))),
    ]
    kinds: set = set()
    scheduler = Scheduler(loaded, prefill_chunk=8)
    ids = [scheduler.insert(*first)]
    events = scheduler.step() + scheduler.step() + scheduler.step()  # the first is decoding already
    ids.append(scheduler.insert(*others[0]))
    events += scheduler.step() + scheduler.step()
    ids += [scheduler.insert(*o) for o in others[1:]]  # they join at later steps
    events += run(scheduler, kinds)
    assert kinds == {"BatchQuantizedKVCache"}
    for rid, (prompt, params) in zip(ids, [first, *others], strict=True):
        assert_same(steps(events, rid), alone(loaded, prompt, params, prefill_chunk=8)[0])


def test_a_batch_converts_when_its_longest_row_is_due_and_quantizes_rows_joining(plain):
    loaded = plain.with_kv(KVQuantization(8, 64, start=14))
    scheduler = Scheduler(loaded, prefill_chunk=32)
    short = scheduler.insert(PROMPT[:4], no_eos(loaded, GREEDY))
    events = scheduler.step()  # prefilled alone (4 tokens): not quantized
    assert type(scheduler._batch[0]) is kv.BatchCache
    long = scheduler.insert(list(range(20, 40)), no_eos(loaded, GREEDY))
    events += scheduler.step()  # 20 tokens: quantized before it joins, so the batch becomes quantized
    assert isinstance(scheduler._batch[0], BatchQuantizedKVCache)
    assert scheduler._batch[0].quantized_at.tolist() == [5, 20]  # the short row: its prompt and one decode step
    events += run(scheduler)
    assert len(steps(events, short)) == len(steps(events, long)) == GREEDY.max_tokens


# Prefix reuse, branches, forks, scoring ---------------------------------------------------------------


def test_branch_and_next_turn_continue_like_the_original(plain):
    loaded = plain.with_kv(KVQuantization(4))
    greedy = no_eos(loaded, GREEDY)
    scheduler = Scheduler(loaded, prefill_chunk=8)
    rid = scheduler.insert(PROMPT, greedy)
    original = steps(run(scheduler), rid)
    # A branch forcing the token drawn there continues exactly as the original did.
    for position in (0, 5):
        branch = scheduler.branch(rid, position, original[position].token_id)
        events = run(scheduler)
        assert_same(steps(events, branch), original[position:])
        assert finished(events, branch).prefilled_tokens == 1  # the quantized cache cut back
    # The next turn reuses the whole context and equals a cold run.
    turn = PROMPT + [s.token_id for s in original] + [50, 51, 52]
    rid2 = scheduler.insert(turn, greedy.with_changes(max_tokens=6))
    events = run(scheduler)
    assert finished(events, rid2).prefilled_tokens <= 4
    assert_same(steps(events, rid2), alone(loaded, turn, greedy.with_changes(max_tokens=6), prefill_chunk=8)[0])


def test_branches_around_a_later_conversion(plain):
    """start = 14: the original converts after decoding token 14. A branch before that point
    runs again from the prompt (its tokens were computed unquantized); after it, it cuts the
    quantized cache back. Both continue like the original."""
    loaded = plain.with_kv(KVQuantization(4, 64, start=14))
    greedy = no_eos(loaded, GREEDY)
    scheduler = Scheduler(loaded, prefill_chunk=8)
    rid = scheduler.insert(PROMPT, greedy)
    original = steps(run(scheduler), rid)
    for position, cost in ((1, len(PROMPT) + 1), (6, 1)):
        branch = scheduler.branch(rid, position, original[position].token_id)
        events = run(scheduler)
        assert_same(steps(events, branch), original[position:])
        assert finished(events, branch).prefilled_tokens == cost


def test_fork_variants_equal_their_solo_runs(plain):
    loaded = plain.with_kv(KVQuantization(8))
    variants = [no_eos(loaded, p) for p in (GREEDY, SEEDED, SEEDED.with_changes(seed=9, top_k=5))]
    scheduler = Scheduler(loaded, prefill_chunk=8)
    ids = scheduler.fork(PROMPT, variants)
    events = run(scheduler)
    for rid, params in zip(ids, variants, strict=True):
        assert_same(steps(events, rid), alone(loaded, PROMPT, params, prefill_chunk=8)[0])


def test_scoring_sees_what_generation_saw(plain):
    from engine.analysis.score import score
    from engine.runtime.text import TokenText

    loaded = plain.with_kv(KVQuantization(4))
    generated, _ = alone(loaded, PROMPT, no_eos(loaded, GREEDY), prefill_chunk=8)
    text = TokenText(loaded.tokenizer)
    vocabulary = Vocabulary.of(loaded, text.piece)
    targets = [s.token_id for s in generated]
    scored = [e for e in score(loaded, PROMPT, targets, GREEDY, vocabulary, text, chunk=8) if isinstance(e, TokenStep)]
    np.testing.assert_allclose([s.raw_logprob for s in scored], [s.raw_logprob for s in generated], atol=TOL)


# Cache kinds and refusals ---------------------------------------------------------------------------------


def test_recurrent_layers_stay_unquantized_beside_quantized_attention(tmp_path):
    """lfm2: ArraysCache (convolution state) and KVCache layers. As mlx-lm's
    maybe_quantize_kv_cache does, only the KVCache layers are quantized."""
    folder = write_tiny_arch(tmp_path / "lfm2", "lfm2", overrides={**WIDE, "block_dim": 128})
    loaded = load(str(folder), kv=KVQuantization(8))
    assert layer_kinds(kv.new_request_cache(loaded.model, loaded.kv)) == ["ArraysCache", "QuantizedCache"]
    kinds: set = set()
    scheduler = Scheduler(loaded, prefill_chunk=len(PROMPT) - 1)
    greedy = no_eos(loaded, GREEDY)
    ids = [scheduler.insert(PROMPT, greedy), scheduler.insert(PROMPT[:4], greedy)]
    events = run(scheduler, kinds)
    assert kinds == {"ArraysCache", "BatchQuantizedKVCache"}
    ours = steps(events, ids[0])
    caches = [
        c.to_quantized(group_size=64, bits=8) if isinstance(c, KVCache) else c for c in make_prompt_cache(loaded.model)
    ]
    assert isinstance(caches[0], ArraysCache)
    stream = generate_step(mx.array(PROMPT), loaded.model, max_tokens=len(ours), prompt_cache=caches)
    reference = [(int(t), np.array(lp)) for t, lp in stream]
    assert [s.token_id for s in ours] == [t for t, _ in reference]
    for step, (_, logprobs) in zip(ours, reference, strict=True):
        np.testing.assert_allclose(
            [c.raw_logprob for c in step.top], logprobs[[c.token_id for c in step.top]], atol=TOL
        )
    assert_same(steps(events, ids[1]), alone(loaded, PROMPT[:4], greedy, prefill_chunk=len(PROMPT) - 1)[0])


def test_sliding_windows_and_odd_widths_are_refused_and_change_nothing(tmp_path, plain):
    gemma = write_tiny_arch(tmp_path / "gemma", "gemma3_text")
    window = load(str(gemma))
    with pytest.raises(EngineError, match="RotatingKVCache, which mlx-lm cannot quantize"):
        window.with_kv(KVQuantization(8, 32))
    assert window.kv == KV_OFF
    with pytest.raises(
        EngineError, match="heads are 64 numbers wide, not a multiple of the group size .32, 64 would fit"
    ):
        plain.with_kv(KVQuantization(8, 128))
    assert plain.kv == KV_OFF
    # Set around the check, the scheduler still refuses it before making anything.
    with pytest.raises(EngineError, match="RotatingKVCache"):
        Scheduler(dataclasses.replace(window, kv=KVQuantization(8, 32)))
    with pytest.raises(EngineError, match="must be a KVQuantization"):
        load(str(gemma), kv="8")  # refused before loading


def test_the_session_loads_with_the_setting_and_keeps_its_model_on_a_refusal(folder, tmp_path):
    from engine.session.session import EngineSession

    session = EngineSession(prefill_chunk=8)
    info = session.load(str(folder), kv=KVQuantization(4, 32))
    assert info.kv == KVQuantization(4, 32) and session.scheduler.kv_quantization == info.kv
    scheduler = session.scheduler
    with pytest.raises(EngineError, match="RotatingKVCache"):
        session.load(str(write_tiny_arch(tmp_path / "gemma", "gemma3_text")), kv=KVQuantization(8, 32))
    assert session.info is info and session.scheduler is scheduler


# The command line -------------------------------------------------------------------------------------


def _main(*args: str) -> tuple[int, list[dict], str]:
    from engine.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


TEXT = "the cat sat on the mat and the dog ran after the ball in the park"


def test_kld_of_the_models_own_quantized_cache(folder):
    summaries = {}
    for bits in ("8", "4"):
        code, records, err = _main("kld", "--base", str(folder), "--kv-bits", bits, "--text", TEXT)
        assert code == 0, err
        summaries[bits] = records[-1]
        assert f"its own weights with a {bits}-bit (group 64) KV cache" in err
        assert err.count("kld: loading") == 1  # B shares the base's weights
    s8, s4 = summaries["8"], summaries["4"]
    assert (s8["kv_bits"], s8["kv_group_size"], s8["quantized_kv_start"]) == (8, 64, 0)
    assert s8["model"] == s8["base"] and s8["precision"] == s8["base_precision"]
    assert 0 < s8["kld_mean"] < 0.01
    assert s4["kld_mean"] > 5 * s8["kld_mean"]


def test_cli_flags_on_generate_score_and_fidelity(folder):
    code, records, err = _main(
        "generate", "--model", str(folder), "--prompt", "the cat", "--max-tokens", "4", "--kv-bits", "8"
    )
    assert code == 0, err
    assert [r["type"] for r in records] == ["token"] * len(records[:-1]) + ["done"]
    code, records, err = _main(
        "score", "--model", str(folder), "--text", TEXT, "--kv-bits", "4", "--kv-group-size", "32"
    )
    assert code == 0 and records[-1]["type"] == "score_done", err
    code, records, err = _main("fidelity", "--model", str(folder), "--text", TEXT, "--kv-bits", "4")
    assert code == 0, err
    assert records[-1]["kv_bits"] == 4 and records[-1]["kld_mean"] > 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--kv-bits", "7"], "--kv-bits: invalid choice"),
        (["--kv-bits", "8", "--kv-group-size", "48"], "--kv-group-size: invalid choice"),
        (["--kv-bits", "8", "--quantized-kv-start", "-3"], "quantized_kv_start must be an integer >= 0"),
        (["--kv-bits", "8", "--server", "http://127.0.0.1:9"], "a server quantizes its own KV cache"),
    ],
)
def test_bad_kv_flags_are_usage_errors(args, needle):
    code, _, err = _main("generate", "--prompt", "hi", *args)
    assert code == 2 and needle in err and "Traceback" not in err, err
