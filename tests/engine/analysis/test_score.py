"""Teacher-forced scoring: equal to what generate reported for the same tokens, through the
whole chain (penalties, DRY, XTC included); independent of the chunk size; the CLI."""

import json
import math
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest

from engine.analysis.score import score
from engine.api.errors import EngineError
from engine.api.events import PrefillProgress, ScoreDone, TokenStep
from engine.api.params import SamplingParams
from engine.runtime.scheduler import Scheduler
from engine.stages.dry_state import Breakers, DryRow

EVERY_STAGE = SamplingParams(
    max_tokens=40,
    temperature=0.9,
    seed=3,
    top_k=40,
    top_p=0.95,
    min_p=0.01,
    typical_p=0.97,
    top_n_sigma=3.0,
    repetition_penalty=1.3,
    presence_penalty=0.2,
    frequency_penalty=0.1,
    penalty_window=8,
    dry_multiplier=1.0,
    dry_allowed_length=1,
    xtc_probability=0.7,
    xtc_threshold=0.02,
    dynatemp_range=0.3,
    logit_bias={5: 2.0, 6: -3.0},
    top_logprobs=6,
)


@pytest.fixture
def prompt(tiny):
    return tiny.tokenizer.encode("the cat sat on the mat")


def generated(loaded, prompt, params):
    scheduler = Scheduler(loaded)
    scheduler.insert(prompt, params)
    steps = []
    while scheduler.has_work():
        steps += [e for e in scheduler.step() if isinstance(e, TokenStep)]
    return steps, scheduler


def scored(loaded, scheduler, context, targets, params, chunk=128, offset=0):
    events = list(score(loaded, context, targets, params, scheduler.vocabulary, scheduler.text, chunk, offset))
    return [e for e in events if isinstance(e, TokenStep)], events


def assert_same_steps(ours, theirs, atol):
    assert [s.token_id for s in ours] == [s.token_id for s in theirs]
    assert [s.index for s in ours] == [s.index for s in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert a.chain == b.chain
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=atol)
        np.testing.assert_allclose(a.entropies, b.entropies, atol=atol)
        assert a.survivors == b.survivors
        by_id = {c.token_id: c for c in b.top}
        for c in a.top:
            if c.token_id in by_id:
                assert c.removed_by == by_id[c.token_id].removed_by
                np.testing.assert_allclose(c.logprobs, by_id[c.token_id].logprobs, atol=atol)
        assert {c.token_id for c in a.top} >= {c.token_id for c in b.top if math.isfinite(c.logprob)} - {b.token_id}


@pytest.mark.parametrize("params", [SamplingParams(max_tokens=40, top_logprobs=5), EVERY_STAGE])
def test_replay_of_a_reply_under_its_own_settings_reproduces_every_stage(tiny, prompt, params):
    steps, scheduler = generated(tiny, prompt, params)
    own = params.with_changes(seed=steps[0].params.seed)
    replay, _ = scored(tiny, scheduler, prompt, [s.token_id for s in steps], own, chunk=16)
    assert_same_steps(replay, steps, atol=1e-5)
    assert all(s.forced and s.rank >= 1 for s in replay)


def test_replay_of_a_reply_whose_settings_changed_midway_uses_each_tokens_own(tiny, prompt):
    """Live changes at outputs 7 and 15 (a new penalty window, DRY switched on then given
    other breakers, XTC, another order): one set per token reproduces every stage."""
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(prompt, EVERY_STAGE.with_changes(dry_multiplier=0.0, xtc_probability=0.0))
    changes = {
        7: EVERY_STAGE.with_changes(penalty_window=3, temperature=1.3, seed=None),
        15: EVERY_STAGE.with_changes(
            dry_sequence_breakers=("&", "\ufffd", "e"),
            top_k=0,
            samplers=("top_p", "dry", "penalties", "xtc", "temperature"),
        ),
    }
    steps = []
    while scheduler.has_work():
        steps += [e for e in scheduler.step() if isinstance(e, TokenStep)]
        if len(steps) in changes:
            scheduler.update_params(rid, changes.pop(len(steps)))
    assert not changes and len(steps) > 20
    per_token = [s.params for s in steps]
    assert len({(p.penalty_window, p.dry_sequence_breakers, p.samplers) for p in per_token}) == 3
    replay, _ = scored(tiny, scheduler, prompt, [s.token_id for s in steps], per_token, chunk=5)
    assert_same_steps(replay, steps, atol=1e-5)
    whole, _ = scored(tiny, scheduler, prompt, [s.token_id for s in steps], per_token[0], chunk=5)
    assert any(not np.allclose(a.logprobs[-1], b.logprobs[-1], atol=1e-3) for a, b in zip(whole, steps, strict=True))
    with pytest.raises(EngineError, match="sets of settings"):
        scored(tiny, scheduler, prompt, [s.token_id for s in steps], per_token[:-1])


def test_chunk_size_changes_nothing_and_ranks_match_numpy(tiny, prompt):
    # Repeated: DRY's entries (allowed length 1) outgrow their first width within a run.
    text = tiny.tokenizer.encode(" the theme of the thin thing is the theatre, quick brown fox jumps" * 2)
    widths = [len(DryRow(prompt + text[:i], Breakers(frozenset())).penalties(EVERY_STAGE)[0]) for i in range(len(text))]
    assert min(widths) <= 8 < max(widths)
    _, scheduler = generated(tiny, prompt, SamplingParams(max_tokens=1))
    whole, events = scored(tiny, scheduler, prompt, text, EVERY_STAGE, chunk=512)
    for chunk in (1, 3):
        pieces, _ = scored(tiny, scheduler, prompt, text, EVERY_STAGE, chunk=chunk)
        assert_same_steps(pieces, whole, atol=1e-5)
    logits = np.array(tiny.model(mx.array(prompt + text)[None])[0].astype(mx.float32))
    for i, step in enumerate(whole):
        row = logits[len(prompt) + i - 1]
        assert step.rank == 1 + int((row > row[text[i]]).sum())
        lp = row - np.log(np.exp(row - row.max()).sum()) - row.max()
        assert step.raw_logprob == pytest.approx(float(lp[text[i]]), abs=1e-5)
    done = events[-1]
    assert isinstance(done, ScoreDone) and done.tokens == len(text)
    mean = -np.mean([s.raw_logprob for s in whole])
    assert done.perplexity == pytest.approx(math.exp(mean), rel=1e-6)
    assert done.mean_surprisal_bits == pytest.approx(mean / math.log(2), rel=1e-6)
    assert [e.done for e in events if isinstance(e, PrefillProgress)][-1] == len(prompt + text) - 1


def test_replay_under_other_settings_marks_what_they_would_remove(tiny, prompt):
    steps, scheduler = generated(tiny, prompt, SamplingParams(max_tokens=20, temperature=1.0, seed=8))
    strict = SamplingParams(temperature=1.0, top_k=3, seed=8, top_logprobs=3)
    replay, _ = scored(tiny, scheduler, prompt, [s.token_id for s in steps], strict)
    np.testing.assert_allclose([r.raw_logprob for r in replay], [s.raw_logprob for s in steps], atol=1e-5)
    removed = [r.index for r in replay if r.rank > 3]
    assert removed == [r.index for r in replay if not math.isfinite(r.logprob)]
    assert removed, "a random model's sampled reply has tokens outside the top 3"


@pytest.mark.parametrize(
    ("context", "targets", "needle"),
    [([], [1, 2], "at least one token of context"), ([1], [], "no token to score"), ([1], [10**6], "must be in")],
)
def test_bad_input_is_refused(tiny, context, targets, needle):
    _, scheduler = generated(tiny, [1, 2], SamplingParams(max_tokens=1))
    with pytest.raises(EngineError, match=needle):
        next(score(tiny, context, targets, SamplingParams(), scheduler.vocabulary, scheduler.text))


def cli(*args):
    proc = subprocess.run([sys.executable, "-m", "engine", "score", *args], capture_output=True, text=True, timeout=600)
    return proc, [json.loads(line) for line in proc.stdout.splitlines()]


def test_cli_score_records_and_chat(tiny_folder, tmp_path):
    path = tmp_path / "text.md"
    path.write_text("the cat sat on the mat", encoding="utf-8")
    proc, records = cli(
        "--model", str(tiny_folder), "--file", str(path), "--top-logprobs", "3", "--top-k", "5", "--temperature", "1"
    )
    assert proc.returncode == 0, proc.stderr
    tokens, done = records[:-1], records[-1]
    assert done["type"] == "score_done" and done["tokens"] == len(tokens)
    for t in tokens:
        assert t["type"] == "token" and t["rank"] >= 1 and t["chain"] == ["raw", "top_k"]
        assert (t["logprob"] is None) == (t["rank"] > 5)
    proc, chat = cli("--model", str(tiny_folder), "--chat", "--prompt", "hi", "--text", "the cat")
    assert proc.returncode == 0 and chat[-1]["tokens"] == len(chat) - 1 == 6
    proc, _ = cli("--model", str(tiny_folder), "--chat", "--text", "x")
    assert proc.returncode == 2 and "--chat needs --prompt" in proc.stderr


@pytest.mark.slow
def test_score_equals_generate_on_the_default_model(smollm):
    prompt = smollm.tokenizer.encode("The capital of France is")
    params = SamplingParams(max_tokens=12, top_logprobs=5)
    steps, scheduler = generated(smollm, prompt, params)
    replay, _ = scored(smollm, scheduler, prompt, [s.token_id for s in steps], params.with_changes(seed=0))
    worst = max(abs(a.raw_logprob - b.raw_logprob) for a, b in zip(replay, steps, strict=True))
    assert worst < 1e-4, worst
    for a, b in zip(replay, steps, strict=True):
        assert [c.token_id for c in a.top][:5] == [c.token_id for c in b.top][:5]


def test_a_prompt_less_text_replays_as_it_was_scored(tiny_folder):
    """``replay_text``: the text's first token is the context, as ``score_text`` read it; a
    text that does not give the reply's tokens is refused before anything runs."""
    from engine.api.errors import EngineError
    from engine.api.events import TokenStep
    from engine.session.session import EngineSession

    session = EngineSession()
    session.load(str(tiny_folder))
    params = SamplingParams(temperature=1.0, seed=3, xtc_probability=0.5, xtc_threshold=0.01, top_logprobs=5)
    text = "the hat in the tin is the hat of the man"
    scored_steps = [e for e in session.score_text(text, params) if isinstance(e, TokenStep)]
    output = [s.token_id for s in scored_steps]
    replayed = [e for e in session.replay_text(text, output, params) if isinstance(e, TokenStep)]
    assert_same_steps(replayed, scored_steps, 1e-6)
    with pytest.raises(EngineError, match="does not tokenize"):
        session.replay_text(text, output[:-1], params)


def test_a_scored_position_whose_derived_bias_statistics_are_untrusted_is_packed_whole(tiny, prompt):
    """Scoring packs many positions at once with the bias's statistics derived from raw's
    (``engine.sampling.inspection``); where a bias bans a token 95 nats over all others,
    that derived Z is under float32's range, and the positions are packed again whole: the
    scored token's logprobs and the entropies match NumPy's float64."""
    from engine.analysis.score import _PositionState, _score_rows
    from engine.runtime.detokenize import StreamDecoder

    scheduler = Scheduler(tiny)
    vocab, start = tiny.vocab_size, len(prompt)
    full = [*prompt, 9, 5]
    logits = np.full((2, vocab), -60.0, np.float32)
    logits[:, 5], logits[:, 9] = 40.0, -55.0
    params = SamplingParams(top_logprobs=3, logit_bias={5: -100.0})
    state = _PositionState(full, start, params, scheduler.vocabulary)
    decoder = StreamDecoder(scheduler.text.decode)
    steps = _score_rows(mx.array(logits), [start, start + 1], [0, 1], full, state, scheduler.text, decoder)
    raw = logits[0].astype(np.float64)
    biased = raw.copy()
    biased[5] -= 100.0
    for step, token in zip(steps, full[start:], strict=True):
        assert step.chain[:2] == ("raw", "bias")
        for k, dist in enumerate((raw, biased)):
            log_z = np.log(np.exp(dist - dist.max()).sum()) + dist.max()
            probs = np.exp(dist - log_z)
            assert step.logprobs[k] == pytest.approx(dist[token] - log_z, abs=1e-5)
            # float32 sums of a flat tail: 1.3e-5 nats off whole, as the step packs it
            assert step.entropies[k] == pytest.approx(-(probs * (dist - log_z)).sum(), abs=5e-5)
