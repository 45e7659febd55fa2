"""``mirostat_v2`` against a NumPy port of llama.cpp's ``llama_sampler_mirostat_v2_apply``:
the kernel on a mixed batch, μ over many steps through the batch's own state, and μ
carried through the CLI, forks, branches, live changes, scoring and replay."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest

from engine.analysis.score import score
from engine.api.carry import carry_from_steps
from engine.api.errors import EngineError
from engine.api.events import TokenStep
from engine.api.params import SamplingParams
from engine.runtime.scheduler import Scheduler
from engine.sampling.batch import SamplingBatch
from engine.specs.mirostat_v2 import next_mu, replay_mu
from engine.stages.mirostat_v2 import MuRows, apply_mirostat_v2, next_mu_on_device
from engine.stages.vocabulary import Vocabulary
from tests.support.drain import run, steps_of

NEG_INF = -np.inf
V = 500


# --- NumPy port of llama.cpp (src/llama-sampling.cpp, llama_sampler_mirostat_v2_apply) -----


def ref_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, np.float64)
    e = np.exp(x - x[np.isfinite(x)].max())
    return e / e.sum()


def ref_truncate(logits: np.ndarray, mu: float) -> np.ndarray:
    """softmax over the candidates (sorted by p, descending), cut at the first one with
    ``-log2(p) > mu``, keep at least one; the kept candidates' logits, the rest -inf."""
    probs = ref_softmax(logits)
    order = [int(t) for t in np.argsort(-probs, kind="stable") if np.isfinite(logits[t])]
    size = next((i for i, t in enumerate(order) if -math.log2(probs[t]) > mu), len(order))
    size = max(size, 1)
    out = np.full_like(logits, NEG_INF)
    out[order[:size]] = logits[order[:size]]
    return out


def ref_update(kept: np.ndarray, token: int, mu: float, tau: float, eta: float) -> float:
    """The renormalized set's surprise of the drawn token: ``mu -= eta * (observed - tau)``."""
    observed = -math.log2(ref_softmax(kept)[token])
    return mu - eta * (observed - tau)


# --- the kernel ------------------------------------------------------------------------


def random_logits(seed: int, rows: int, vocab: int = V) -> np.ndarray:
    """Continuous logits (no ties), about 5 % of each row already removed."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 3.0, (rows, vocab)).astype(np.float32)
    x[rng.random((rows, vocab)) < 0.05] = NEG_INF
    return x


def test_the_kernel_keeps_what_llama_cpp_keeps_on_a_mixed_batch():
    mus = [0.0, 0.5, 2.0, 5.0, 10.0, 40.0]  # 0: only the top token; 40: everything left
    x = random_logits(1, len(mus))
    got = np.asarray(apply_mirostat_v2(mx.array(x), mx.array(np.float32(mus).reshape(-1, 1))))
    kept_counts = []
    for r, mu in enumerate(mus):
        expected = ref_truncate(x[r], mu)
        np.testing.assert_array_equal(np.isfinite(got[r]), np.isfinite(expected), err_msg=f"row {r}")
        np.testing.assert_array_equal(got[r][np.isfinite(got[r])], x[r][np.isfinite(expected)])
        kept_counts.append(int(np.isfinite(expected).sum()))
    assert kept_counts[0] == 1 and kept_counts[-1] == np.isfinite(x[-1]).sum()
    assert len(set(kept_counts)) > 3  # the data cover the range


# --- μ over many steps, through the batch's own state ----------------------------------------

ROWS = [
    SamplingParams(temperature=1.0, samplers=("temperature", "mirostat_v2"), mirostat_tau=3.0, seed=1),
    SamplingParams(
        temperature=0.7, samplers=("temperature", "mirostat_v2"), mirostat_tau=5.0, mirostat_eta=0.3, seed=2
    ),
    SamplingParams(
        temperature=1.5, samplers=("mirostat_v2", "temperature"), mirostat_tau=1.5, mirostat_eta=0.5, seed=3
    ),
    SamplingParams(temperature=1.0, seed=4),  # no mirostat: μ stays 2τ
    SamplingParams(temperature=0.0, samplers=("temperature", "mirostat_v2"), mirostat_tau=2.0, mirostat_eta=0.2),
]


def entering_mirostat(row: np.ndarray, p: SamplingParams) -> np.ndarray:
    """The distribution entering the stage: after temperature when it comes first (T = 0
    divides by 1)."""
    if p.samplers.index("mirostat_v2") > p.samplers.index("temperature") and p.temperature > 0:
        return row / np.float32(p.temperature)
    return row


def test_mu_evolves_as_llama_cpp_over_many_steps_with_mixed_rows():
    params = [p if p.seed is not None else p.with_changes(seed=9) for p in ROWS]
    batch = None
    for p in params:
        one = SamplingBatch.of(Vocabulary(V), p, [1, 2, 3])
        batch = one if batch is None else (batch.extend(one) or batch)
    mus = [2.0 * p.mirostat_tau for p in params]
    moved = set()
    for step in range(12):
        x = random_logits(100 + step, len(params))
        sampled = batch.sample(mx.array(x), [step] * len(params))
        packed = np.array(sampled.packed)
        steps = [sampled.unpack(packed, r, p.top_logprobs, str, batch.counter(r)) for r, p in enumerate(params)]
        tokens = [int(t) for t in np.array(sampled.tokens)]
        for r, p in enumerate(params):
            if "mirostat_v2" not in p.samplers:
                assert "mirostat_v2" not in steps[r].chain
                continue
            kept = ref_truncate(entering_mirostat(x[r], p), mus[r])
            at = steps[r].chain.index("mirostat_v2")
            assert steps[r].survivors[at] == np.isfinite(kept).sum(), f"step {step}, row {r}"
            assert np.isfinite(kept[tokens[r]]), "the drawn token is one mirostat kept"
            new = ref_update(kept, tokens[r], mus[r], p.mirostat_tau, p.mirostat_eta)
            if abs(new - mus[r]) > 1e-3:
                moved.add(r)
            mus[r] = new
        batch.accept(tokens, [None] * len(params), steps)
        np.testing.assert_allclose(batch.states["mirostat_v2"].mus, mus, rtol=1e-4, atol=1e-4)
    assert moved == {0, 1, 2, 4}
    assert batch.states["mirostat_v2"].mus[3] == 2.0 * params[3].mirostat_tau


# --- the scheduler, the CLI, branches, scoring ---------------------------------------------

MIROSTAT = SamplingParams(
    temperature=1.0,
    samplers=("penalties", "temperature", "mirostat_v2"),
    repetition_penalty=1.1,
    mirostat_tau=2.5,
    mirostat_eta=0.4,
    seed=11,
    max_tokens=16,
)


@pytest.fixture
def prompt(tiny):
    return tiny.tokenizer.encode("the cat sat on the mat")


def replayed_mu(steps: list[TokenStep], params: list[SamplingParams]) -> list[float]:
    """μ before each token, recomputed from the reported logprobs after the stage."""
    mus = [2.0 * params[0].mirostat_tau]
    for step, p in zip(steps, params, strict=True):
        lp = step.logprob_at("mirostat_v2")
        mus.append(mus[-1] - p.mirostat_eta * (-lp / math.log(2) - p.mirostat_tau))
    return mus[:-1]


def assert_kept_by_mu(step: TokenStep, mu: float) -> None:
    """Every reported candidate is kept by the stage exactly when its surprise entering it is <= μ."""
    at = step.chain.index("mirostat_v2")
    best = max(c.logprobs[at - 1] for c in step.top)
    for c in step.top:
        entering = c.logprobs[at - 1]
        if not math.isfinite(entering) or abs(-entering / math.log(2) - mu) < 1e-4:
            continue  # removed earlier, or on the boundary within rounding
        kept = -entering / math.log(2) <= mu or entering == best
        assert kept == math.isfinite(c.logprobs[at]), (c.token_id, entering, mu)


def test_generation_follows_mu_and_a_branch_restores_it(tiny, prompt):
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(prompt, MIROSTAT)
    original = steps_of(run(scheduler), rid)
    assert len(original) == MIROSTAT.max_tokens and all("mirostat_v2" in s.chain for s in original)
    mus = replayed_mu(original, [MIROSTAT] * len(original))
    for step, mu in zip(original, mus, strict=True):
        assert_kept_by_mu(step, mu)
    assert len({s.survivors[s.chain.index("mirostat_v2")] for s in original}) > 1  # μ moved the cut
    # A branch at k with the token drawn there continues exactly as the original: the same
    # seeded draws, and μ as it was before token k (from 2τ it would cut elsewhere).
    k = 6
    branch = scheduler.branch(rid, k, original[k].token_id)
    again = steps_of(run(scheduler), branch)
    assert [s.token_id for s in again] == [s.token_id for s in original[k:]]
    np.testing.assert_allclose([s.logprobs for s in again], [s.logprobs for s in original[k:]], atol=1e-5)
    (forked,) = scheduler.fork_from(rid, k, [MIROSTAT])
    assert [s.token_id for s in steps_of(run(scheduler), forked)] == [s.token_id for s in original[k:]]


def test_a_continuation_of_a_stored_reply_rebuilds_mu_from_its_steps(tiny, prompt):
    # The app continues replies the engine does not hold (saved ones, after a restart):
    # μ is folded from the stored steps' logprobs after the stage, so the continuation
    # equals the engine's own branch, which restores μ from its record.
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(prompt, MIROSTAT)
    original = steps_of(run(scheduler), rid)
    k = 6
    carry = carry_from_steps(original[:k])
    assert carry["mirostat_v2"] == pytest.approx(replayed_mu(original, [MIROSTAT] * len(original))[k])
    output = [s.token_id for s in original[:k]]
    again = Scheduler(tiny)
    cont = again.continue_output(prompt, output, original[k].token_id, MIROSTAT, carry=carry)
    continued = steps_of(run(again), cont)
    assert [s.token_id for s in continued] == [s.token_id for s in original[k:]]
    np.testing.assert_allclose([s.logprobs for s in continued], [s.logprobs for s in original[k:]], atol=1e-5)
    (forked,) = again.fork_output(prompt, output, [MIROSTAT], carry=carry)
    assert [s.token_id for s in steps_of(run(again), forked)] == [s.token_id for s in original[k:]]
    # Without the carry μ restarts at 2τ and the stage cuts elsewhere.
    fresh = again.continue_output(prompt, output, original[k].token_id, MIROSTAT)
    cut = [s.survivors[s.chain.index("mirostat_v2")] for s in steps_of(run(again), fresh)]
    assert cut != [s.survivors[s.chain.index("mirostat_v2")] for s in original[k:]]
    # A stage that was off for a token starts afresh when it joins again.
    off = [dataclasses.replace(s, params=MIROSTAT.with_changes(samplers=("temperature",))) for s in original[:2]]
    assert carry_from_steps(original[:3] + off) == {}
    lp = original[2].logprob_at("mirostat_v2")
    expected = 2 * MIROSTAT.mirostat_tau - MIROSTAT.mirostat_eta * (-lp / math.log(2) - MIROSTAT.mirostat_tau)
    assert carry_from_steps(off + original[2:3]) == {"mirostat_v2": pytest.approx(expected)}
    for bad in ({"top_k": 1.0}, {"mirostat_v2": float("nan")}, {"mirostat_v2": "5"}, [("mirostat_v2", 1.0)]):
        with pytest.raises(EngineError):
            again.continue_output(prompt, output, original[k].token_id, MIROSTAT, carry=bad)


def test_fork_variants_each_equal_their_solo_run(tiny, prompt):
    variants = [
        MIROSTAT,
        MIROSTAT.with_changes(mirostat_tau=1.0, seed=12),
        MIROSTAT.with_changes(samplers=("temperature",)),
    ]
    scheduler = Scheduler(tiny)
    ids = scheduler.fork(prompt, variants)
    events = run(scheduler)
    for rid, p in zip(ids, variants, strict=True):
        alone = Scheduler(tiny)
        solo = alone.insert(prompt, p)
        assert [s.token_id for s in steps_of(events, rid)] == [s.token_id for s in steps_of(run(alone), solo)]


def test_scoring_and_replay_follow_mu_token_by_token(tiny, prompt):
    # Generation with a live change of η and τ at token 5 (μ carries on), then the reply
    # scored under its own per-token settings: the same numbers, μ updated in order.
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(prompt, MIROSTAT)
    changed = MIROSTAT.with_changes(mirostat_eta=0.05, mirostat_tau=4.0)
    steps = []
    while scheduler.has_work():
        steps += steps_of(scheduler.step(), rid)
        if len(steps) == 5:
            scheduler.update_params(rid, changed)
    per_token = [s.params for s in steps]
    assert per_token[4].mirostat_eta == 0.4 and per_token[5].mirostat_eta == 0.05
    for step, mu in zip(steps, replayed_mu(steps, per_token), strict=True):
        assert_kept_by_mu(step, mu)
    events = score(tiny, prompt, [s.token_id for s in steps], per_token, scheduler.vocabulary, scheduler.text)
    ours = [e for e in events if isinstance(e, TokenStep)]
    assert [s.chain for s in ours] == [s.chain for s in steps]
    assert [s.survivors for s in ours] == [s.survivors for s in steps]
    np.testing.assert_allclose([s.logprobs for s in ours], [s.logprobs for s in steps], atol=1e-5)
    # Scored under one setting from a fresh μ, the cut differs from the one generation made.
    fresh = [e for e in score(tiny, prompt, [s.token_id for s in steps], changed, scheduler.vocabulary, scheduler.text)]
    fresh_steps = [e for e in fresh if isinstance(e, TokenStep)]
    assert [s.survivors for s in fresh_steps] != [s.survivors for s in steps]
    for step, mu in zip(fresh_steps, replayed_mu(fresh_steps, [changed] * len(fresh_steps)), strict=True):
        assert_kept_by_mu(step, mu)


def test_cli_generate_and_score_run_mirostat(tiny_folder):
    args = ["--model", str(tiny_folder), "--prompt", "the cat", "--samplers", "mirostat_v2", "--max-tokens", "10"]
    args += ["--mirostat-tau", "2", "--mirostat-eta", "0.5", "--seed", "5", "--top-logprobs", "50"]
    proc = subprocess.run([sys.executable, "-m", "engine", "generate", *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    tokens = [r for r in records if r["type"] == "token"]
    assert len(tokens) >= 5 and all(r["chain"] == ["raw", "mirostat_v2"] for r in tokens)  # EOS may end it
    mu = 4.0
    for r in tokens:
        for c in r["top"]:
            surprise = -c["logprobs"]["raw"] / math.log(2)
            if abs(surprise - mu) > 1e-4 and c["logprobs"]["raw"] < max(t["logprobs"]["raw"] for t in r["top"]):
                assert (c["removed_by"] == "mirostat_v2") == (surprise > mu)
        mu -= 0.5 * (-r["logprob"] / math.log(2) - 2.0)
    text = "".join(r["text"] for r in tokens)
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine",
            "generate",
            "--model",
            str(tiny_folder),
            "--prompt",
            "x",
            "--mirostat-eta",
            "2",
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: mirostat_eta must be in [0.0, 1.0], got 2.0.")
    scored = subprocess.run(
        [sys.executable, "-m", "engine", "score", "--model", str(tiny_folder), "--text", "the cat" + text]
        + ["--samplers", "mirostat_v2", "--mirostat-tau", "2", "--mirostat-eta", "0.5"],
        capture_output=True,
        text=True,
    )
    assert scored.returncode == 0, scored.stderr
    assert all(
        json.loads(line).get("chain", ["raw", "mirostat_v2"]) == ["raw", "mirostat_v2"]
        for line in scored.stdout.splitlines()
    )


# --- μ on the device: the step sampled ahead -------------------------------------------------


def _mirostat_run(
    tiny, sample_ahead: bool, shift: float = 0.0, two_groups: bool = False
) -> tuple[list[list[TokenStep]], dict[str, int]]:
    """Rows with their own τ, η and lengths, one joining late and one changing τ and η live;
    after every step each row's μ must be the host fold (``next_mu``) of its reported
    logprobs. ``shift`` is added to every μ the step computes on the device (what a step
    sampled ahead reads), to see the host's check discard such a step. Returns each row's
    steps and how many steps were sampled ahead and how many of those were used."""
    prompt = tiny.tokenizer.encode("the cat sat on the mat, the cat sat")
    scheduler = Scheduler(tiny, sample_ahead=sample_ahead)
    mus = scheduler._sampling.states["mirostat_v2"]
    seen = {"ahead": 0, "held": 0}
    sample_ahead, updated, accept = SamplingBatch.sample_ahead, MuRows.updated, MuRows.accept

    def counted_ahead(self, *args):
        out = sample_ahead(self, *args)
        seen["ahead"] += out is not None
        return out

    def shifted(self, new):
        updated(self, {"mirostat_mu": new["mirostat_mu"] + shift})

    def checked(self, params, accepted):
        read = self.ahead is not None
        accept(self, params, accepted)
        seen["held"] += read and self.ahead_held()

    def params(i: int) -> SamplingParams:
        return MIROSTAT.with_changes(
            seed=i, mirostat_tau=1.5 + i, mirostat_eta=0.1 * (i + 1), max_tokens=12 + 4 * i, top_logprobs=3
        )

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SamplingBatch, "sample_ahead", counted_ahead)
        patch.setattr(MuRows, "updated", shifted)
        patch.setattr(MuRows, "accept", checked)
        ids = [scheduler.insert(prompt[i:], params(i)) for i in range(3)]
        if two_groups:  # another stage order, without mirostat: the step runs in two groups
            other = SamplingParams(temperature=0.8, top_k=5, samplers=("top_k", "temperature"), seed=9, max_tokens=20)
            ids.append(scheduler.insert(prompt, other))
        steps: dict[int, list[TokenStep]] = {}
        count = 0
        while scheduler.has_work():
            for event in scheduler.step():
                if isinstance(event, TokenStep):
                    steps.setdefault(event.request_id, []).append(event)
            count += 1
            if count == 3:
                ids.append(scheduler.insert(prompt[2:], params(3)))
            if count == 6 and scheduler.is_live(ids[0]):
                scheduler.update_params(ids[0], params(0).with_changes(mirostat_tau=4.0, mirostat_eta=0.05))
            for row, request in enumerate(scheduler._active):
                mine = steps.get(request.id, [])
                if "mirostat_v2" not in request.params.samplers:
                    continue
                mu = 2.0 * mine[0].params.mirostat_tau if mine else mus.mus[row]
                for step in mine:
                    mu = replay_mu(mu, step.params, step.logprob_at("mirostat_v2"))
                assert mus.mus[row] == mu, (count, row)
    return [steps[rid] for rid in ids], seen


def _figures(steps: list[list[TokenStep]]) -> list:
    return [[(s.token_id, s.logprobs, s.survivors) for s in row] for row in steps]


def test_mu_computed_on_the_device_samples_the_next_step_ahead_and_is_the_hosts(tiny):
    """The compiled step computes μ after its token (a whole-batch group) in the host's
    float32 operations, so a mirostat chain is sampled ahead; the host checks the μ it read
    and samples the step again where a rounding of log Z differs. Either way every token,
    logprob and cut is the one of a run that never samples ahead."""
    plain, none = _mirostat_run(tiny, sample_ahead=False)
    ahead, seen = _mirostat_run(tiny, sample_ahead=True)
    assert _figures(ahead) == _figures(plain)
    assert none["ahead"] == 0 and sum(map(len, plain)) > 60
    assert seen["ahead"] > 15 and seen["held"] >= 0.8 * seen["ahead"], seen
    # A μ the host does not hold is never used: every step sampled ahead is sampled again.
    shifted, missed = _mirostat_run(tiny, sample_ahead=True, shift=3.0)
    assert _figures(shifted) == _figures(plain)
    assert missed["ahead"] > 0 and missed["held"] == 0, missed


def test_mu_of_a_step_in_several_groups_is_joined_in_batch_order(tiny):
    """A row of another stage order (without mirostat) splits the step into two groups: μ
    is computed in the mirostat group and joined with the other rows' in batch order
    (``Stage.update_rows``), so the batch is still sampled ahead, and reports what a run
    that never samples ahead reports."""
    plain, _ = _mirostat_run(tiny, sample_ahead=False, two_groups=True)
    ahead, seen = _mirostat_run(tiny, sample_ahead=True, two_groups=True)
    assert _figures(ahead) == _figures(plain)
    assert seen["ahead"] > 15 and seen["held"] >= 0.8 * seen["ahead"], seen
    shifted, missed = _mirostat_run(tiny, sample_ahead=True, shift=3.0, two_groups=True)
    assert _figures(shifted) == _figures(plain)
    assert missed["held"] == 0, missed


def test_the_devices_mu_update_is_next_mu_to_the_bit():
    rng = np.random.default_rng(5)
    mu = rng.uniform(0.0, 20.0, 4096).astype(np.float32)
    tau = rng.uniform(0.0, 10.0, 4096).astype(np.float32)
    eta = rng.uniform(0.0, 1.0, 4096).astype(np.float32)
    logprob = -rng.exponential(3.0, 4096).astype(np.float32)
    logprob[::7] = -np.inf  # a forced token the stage removed: μ stays
    column = lambda a: mx.array(a.reshape(-1, 1))  # noqa: E731
    fn = mx.compile(next_mu_on_device)
    got = np.asarray(fn(column(mu), column(tau), column(eta), column(logprob)))[:, 0]
    expected = [
        next_mu(float(m), float(t), float(e), float(lp)) if np.isfinite(lp) else float(m)
        for m, t, e, lp in zip(mu, tau, eta, logprob, strict=True)
    ]
    np.testing.assert_array_equal(got, np.asarray(expected, np.float32))
