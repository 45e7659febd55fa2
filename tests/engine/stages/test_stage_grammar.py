"""The grammar stage against llguidance's own matcher and mask helpers (made here, from the
model's tokenizer, independently of the engine's), ``jsonschema`` and Python's ``re``.

A random-weight model wants anything but JSON: every token of its replies is chosen under
the grammar's constraint, which is the hardest case for the mask.
"""

from __future__ import annotations

import json
import math
import re

import jsonschema
import llguidance
import llguidance.hf
import llguidance.numpy as llnp
import mlx.core as mx
import numpy as np
import pytest

from engine.api.carry import carry_from_steps
from engine.api.events import TokenStep
from engine.api.params import SamplingParams, SamplingParamsError
from engine.runtime.scheduler import Scheduler
from engine.stages.grammar import apply_grammar, unpack_mask
from tests.support.drain import done_of, run, steps_of

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
COMPACT = {**SCHEMA, "x-guidance": {"whitespace_flexible": False}}
REGEX = r"[0-9]{2,3}-(yes|no)"
LARK = 'start: "(" num ("+" num)* ")"\nnum: /[1-9][0-9]?/'
GBNF = 'root ::= "ok" | "fail: " [a-z]+ "."'


def json_params(schema=COMPACT, **changes) -> SamplingParams:
    return SamplingParams(grammar=("json_schema", json.dumps(schema)), **{"top_logprobs": 5, **changes})


@pytest.fixture(scope="module")
def ll_tokenizer(tiny):
    """llguidance's tokenizer of the tiny model, made here as llguidance documents it."""
    return llguidance.hf.from_tokenizer(
        tiny.tokenizer._tokenizer, n_vocab=tiny.vocab_size, eos_token=sorted(tiny.eos_token_ids)
    )


def reference_matcher(ll_tokenizer, kind: str, text: str):
    return llguidance.LLMatcher(ll_tokenizer, llguidance.grammar_from(kind, text), log_level=0)


def allowed_ids(matcher, vocab: int) -> np.ndarray:
    mask = llnp.allocate_token_bitmask(1, vocab)
    llnp.fill_next_token_bitmask(matcher, mask, 0)
    return np.unpackbits(mask.view(np.uint8), bitorder="little")[:vocab].astype(bool)


@pytest.fixture
def prompt(tiny):
    return tiny.tokenizer.encode("give me json")


# The kernel ------------------------------------------------------------------------------


@pytest.mark.parametrize("vocab", [32, 37, 1000, 4097])
def test_the_kernel_masks_as_llguidances_numpy_helper(vocab):
    rng = np.random.default_rng(vocab)
    logits = rng.normal(size=(3, vocab)).astype(np.float32)
    bits = rng.integers(-(2**31), 2**31, size=(3, (vocab + 31) // 32), dtype=np.int64).astype(np.int32)
    bits[2] = -1  # a row without a grammar: all allowed
    expected = logits.copy()
    llnp.apply_token_bitmask_inplace(expected, bits)
    got = np.asarray(apply_grammar(mx.array(logits), unpack_mask(mx.array(bits), vocab), mx.array(logits)))
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got[2], logits[2])


def test_a_row_left_with_no_allowed_token_gets_them_back_with_their_raw_logits():
    raw = mx.array([[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]])
    entering = mx.array([[-math.inf, -math.inf, 3.0, 4.0], [1.0, -math.inf, 3.0, 4.0]])
    allowed = mx.array([[True, True, False, False], [True, True, False, False]])
    out = np.asarray(apply_grammar(entering, allowed, raw))
    np.testing.assert_array_equal(out[0], [1.0, 2.0, -math.inf, -math.inf])  # from raw
    np.testing.assert_array_equal(out[1], [1.0, -math.inf, -math.inf, -math.inf])  # what was left


# Refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("grammar", "words"),
    [
        (("json_schema", "{not json"), "cannot be compiled"),
        (("json_schema", '{"type": "integer", "minimum": "x"}'), "cannot be compiled"),
        (("regex", "a(b"), "unclosed group"),
        (("lark", "start: foo"), 'unknown name: "foo"'),
        (("gbnf", "root ::= foo"), "Rule 'foo' not found"),
        (("yaml", "a: b"), "kind must be one of"),
        (("regex", "   "), "is empty"),
        (("regex",), "must be () or (kind, text)"),
    ],
)
def test_a_grammar_that_cannot_be_compiled_is_refused_with_the_librarys_message(tiny, prompt, grammar, words):
    with pytest.raises(SamplingParamsError, match=re.escape(words)) as caught:
        SamplingParams(grammar=grammar)
    assert caught.value.field == "grammar"
    scheduler = Scheduler(tiny)
    first = scheduler.insert(prompt, SamplingParams(max_tokens=1))
    assert scheduler.insert(prompt, SamplingParams(max_tokens=1)) == first + 1  # nothing was used by the refusal


def test_any_json_ignores_its_text_and_every_kind_round_trips():
    assert SamplingParams(grammar=("json", "whatever")).grammar == ("json", "")
    for grammar in (("json_schema", json.dumps(SCHEMA)), ("regex", REGEX), ("lark", LARK), ("gbnf", GBNF)):
        params = SamplingParams(grammar=grammar)
        assert SamplingParams.from_dict(json.loads(json.dumps(params.to_dict()))) == params


# Validity --------------------------------------------------------------------------------

SETTINGS = [
    {},
    {"temperature": 1.0},
    {"temperature": 1.5, "top_k": 40},
    {"temperature": 0.8, "top_p": 0.9, "min_p": 0.05},
    {"temperature": 1.0, "repetition_penalty": 1.3, "dry_multiplier": 0.8},
    {"temperature": 1.0, "samplers": ("temperature", "top_k", "grammar")},  # last, after truncation
    {"temperature": 0.0, "samplers": ("temperature", "grammar")},  # greedy, the grammar after temperature
    {"temperature": 1.0, "xtc_probability": 1.0, "xtc_threshold": 0.05},
]


def test_every_complete_reply_is_valid_under_its_schema_regex_and_grammar(tiny, prompt, ll_tokenizer):
    """Many seeds and settings in one batch: each reply that ended is valid (jsonschema,
    Python's re; Lark and GBNF by the languages they describe, written here as regexes); each
    one cut by max_tokens is a prefix a matcher built here from llguidance accepts."""
    cases = []
    for i, settings in enumerate(SETTINGS):
        for seed in range(3):
            cases.append(("json", json_params(max_tokens=60, seed=seed + 10 * i, **settings)))
            cases.append(("regex", SamplingParams(grammar=("regex", REGEX), max_tokens=12, seed=seed, **settings)))
        cases.append(("lark", SamplingParams(grammar=("lark", LARK), max_tokens=20, seed=i, **settings)))
        cases.append(("gbnf", SamplingParams(grammar=("gbnf", GBNF), max_tokens=20, seed=i, **settings)))
    complete = {"json": 0, "regex": 0, "lark": 0, "gbnf": 0}
    for start in range(0, len(cases), 16):
        scheduler = Scheduler(tiny, max_batch_size=16)
        ids = [(kind, scheduler.insert(prompt, params)) for kind, params in cases[start : start + 16]]
        events = run(scheduler)
        for (kind, rid), (_, params) in zip(ids, cases[start : start + 16], strict=True):
            done = done_of(events, rid)
            assert done.grammar is not None and done.grammar.left_at is None
            if done.finish_reason != "stop":
                assert not done.grammar.complete or kind == "regex"
                reference = reference_matcher(ll_tokenizer, *params.grammar)
                assert reference.consume_tokens([s.token_id for s in steps_of(events, rid)]), done.text
                continue
            assert done.grammar.complete
            text = done.text
            if kind == "json":
                jsonschema.validate(json.loads(text), SCHEMA)
            elif kind == "regex":
                assert re.fullmatch(REGEX, text), text
            else:
                assert re.fullmatch(
                    r"\(([1-9][0-9]?)(\+[1-9][0-9]?)*\)" if kind == "lark" else r"ok|fail: [a-z]+\.", text
                )
            complete[kind] += 1
    print(f"complete and valid: {complete} of {len(cases)} replies")  # the closing note's counts (pytest -s)
    assert complete["json"] >= 12 and complete["regex"] >= 12 and complete["lark"] >= 3 and complete["gbnf"] >= 3


# The mask and the figures against llguidance and NumPy ----------------------------------


def test_each_step_masks_what_llguidances_own_matcher_forbids_and_reports_the_mass(tiny, prompt, ll_tokenizer):
    """A reply replayed through a matcher made here: each step's allowed count is its mask's,
    a candidate is removed by the grammar exactly where that mask forbids it, and the mass
    removed from raw is 1 − Σ softmax(raw) over the allowed tokens, from the model's own
    logits computed here with NumPy."""
    params = json_params(max_tokens=40, temperature=1.0, seed=4, top_logprobs=20)
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(prompt, params)
    steps = steps_of(run(scheduler), rid)
    tokens = [s.token_id for s in steps]
    logits = tiny.model(mx.array([prompt + tokens[:-1]]))[0, len(prompt) - 1 :].astype(mx.float32)
    matcher = reference_matcher(ll_tokenizer, "json_schema", json.dumps(COMPACT))
    for step, raw in zip(steps, np.asarray(logits), strict=True):
        allowed = allowed_ids(matcher, tiny.vocab_size)
        record = step.grammar
        assert record.allowed == int(allowed.sum()) and allowed[step.token_id]
        assert step.chain[:2] == ("raw", "grammar")
        for c in step.top:
            assert (c.removed_by == "grammar") == (not allowed[c.token_id])
        shifted = raw.astype(np.float64) - raw.max()
        p = np.exp(shifted) / np.exp(shifted).sum()
        assert record.removed_raw == pytest.approx(1.0 - p[allowed].sum(), abs=2e-5)
        assert record.removed == pytest.approx(record.removed_raw, abs=1e-6)  # the grammar is first
        wanted = int(np.argmax(raw))
        assert record.wanted == (None if allowed[wanted] else wanted)
        assert record.forced == (allowed.sum() == 1)
        assert matcher.consume_token(step.token_id)
        assert record.accepting == matcher.is_accepting()


def test_the_masked_mass_of_the_distribution_entering_a_grammar_placed_later(tiny, prompt):
    """After top_k the grammar removes a share of what top_k left, not of raw."""
    params = json_params(max_tokens=12, temperature=0.9, top_k=50, samplers=("top_k", "grammar", "temperature"))
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(prompt, params)
    steps = steps_of(run(scheduler), rid)
    for step in steps:
        assert step.chain == ("raw", "top_k", "grammar", "temperature")
        kept = math.exp(step.logprob_at("top_k") - step.logprob_at("grammar")) if step.grammar.removed < 1 else 0.0
        # The chosen token's probability grows by exactly the kept share: p_after = p_before / kept.
        assert step.grammar.removed == pytest.approx(1.0 - kept, abs=1e-5)


# Batch, branches, changes ----------------------------------------------------------------


def test_in_a_batch_each_row_is_what_it_is_alone(tiny, prompt):
    params = [
        json_params(max_tokens=30, temperature=1.0, seed=1),
        SamplingParams(max_tokens=20, temperature=1.0, seed=2),  # no grammar, same batch
        SamplingParams(grammar=("regex", REGEX), max_tokens=10, seed=3, temperature=0.9),
        json_params(max_tokens=30, seed=4, samplers=("temperature", "grammar")),
    ]
    alone = []
    for p in params:
        scheduler = Scheduler(tiny)
        rid = scheduler.insert(prompt, p)
        events = run(scheduler)
        alone.append(([(s.token_id, s.grammar) for s in steps_of(events, rid)], done_of(events, rid).grammar))
    scheduler = Scheduler(tiny)
    ids = [scheduler.insert(prompt, p) for p in params]
    events = run(scheduler)
    for rid, (steps, stats) in zip(ids, alone, strict=True):
        together = [(s.token_id, s.grammar) for s in steps_of(events, rid)]
        assert [t for t, _ in together] == [t for t, _ in steps]
        for (_, a), (_, b) in zip(together, steps, strict=True):
            assert (a is None) == (b is None)
            if a is not None:
                assert (a.allowed, a.wanted, a.accepting) == (b.allowed, b.wanted, b.accepting)
                assert a.removed_raw == pytest.approx(b.removed_raw, abs=1e-6)
        assert (done_of(events, rid).grammar is None) == (stats is None)


def test_pipelined_or_not_the_same_reply(tiny, prompt):
    params = json_params(max_tokens=25, temperature=1.0, seed=7, repetition_penalty=1.2)
    replies = []
    for sample_ahead in (True, False):
        scheduler = Scheduler(tiny, sample_ahead=sample_ahead)
        rid = scheduler.insert(prompt, params)
        replies.append([(s.token_id, s.grammar.allowed) for s in steps_of(run(scheduler), rid)])
    assert replies[0] == replies[1]


def _inside_string(steps: list[TokenStep]) -> int:
    """An output index inside the first JSON string value, with another allowed candidate."""
    text = ""
    for i, step in enumerate(steps):
        if text.count('"') == 3:  # after '{"key":"': inside the first value, a string
            others = [c for c in step.top if c.removed_by is None and c.token_id != step.token_id]
            if others:
                return i
        text += step.piece
    raise AssertionError(f"no place inside a string in {text!r}")


def test_a_branch_from_inside_a_json_string_continues_validly(tiny, prompt):
    params = json_params(max_tokens=80, temperature=1.0, seed=11, top_logprobs=20)
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(prompt, params)
    steps = steps_of(run(scheduler), rid)
    at = _inside_string(steps)
    other = next(c.token_id for c in steps[at].top if c.removed_by is None and c.token_id != steps[at].token_id)
    branch = scheduler.branch(rid, at, other)
    events = run(scheduler)
    new = steps_of(events, branch)
    assert new[0].forced and new[0].token_id == other and not new[0].grammar.left
    done = done_of(events, branch)
    if done.finish_reason == "stop":
        ids = [s.token_id for s in steps[:at]] + [s.token_id for s in new if s.token_id not in tiny.eos_token_ids]
        text = tiny.tokenizer.decode(ids)  # pieces split a character's bytes
        jsonschema.validate(json.loads(text), SCHEMA)
    assert all(not s.grammar.left for s in new)
    # The same from a stored reply: the carry says how many tokens the grammar had read.
    carry = carry_from_steps(steps[:at])
    assert carry == {"grammar": (params.grammar, at)}
    again = scheduler.continue_output(prompt, [s.token_id for s in steps[:at]], other, params, carry)
    assert [s.token_id for s in steps_of(run(scheduler), again)] == [s.token_id for s in new]


def test_a_forced_token_the_grammar_forbids_leaves_it(tiny, prompt):
    params = json_params(max_tokens=8, temperature=1.0, seed=5, top_logprobs=20)
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(prompt, params)
    steps = steps_of(run(scheduler), rid)
    forbidden = next(c.token_id for c in steps[2].top if c.removed_by == "grammar")
    branch = scheduler.branch(rid, 2, forbidden)
    events = run(scheduler)
    new = steps_of(events, branch)
    assert new[0].grammar.left and new[0].logprob_at("grammar") == -math.inf
    assert all(s.grammar.left and s.grammar.allowed == tiny.vocab_size for s in new[1:])
    assert done_of(events, branch).grammar.left_at == 2


def test_a_live_change_starts_the_grammar_at_the_next_token(tiny, prompt):
    scheduler = Scheduler(tiny)
    free = SamplingParams(max_tokens=20, temperature=1.0, seed=3)
    rid = scheduler.insert(prompt, free)
    events = []
    while len(steps_of(events, rid)) < 4:
        events += scheduler.step()
    scheduler.update_params(rid, free.with_changes(grammar=("regex", "[a-c]{3}x")))
    events += run(scheduler)
    steps = steps_of(events, rid)
    changed = next(i for i, s in enumerate(steps) if s.grammar is not None)
    assert all(s.grammar is None for s in steps[:changed])
    tail = tiny.tokenizer.decode([s.token_id for s in steps[changed:] if s.token_id not in tiny.eos_token_ids])
    assert done_of(events, rid).finish_reason == "stop" and re.fullmatch("[a-c]{3}x", tail)


def test_scoring_a_text_under_a_grammar_says_where_it_leaves_it(tiny, prompt):
    from engine.analysis.score import score

    scheduler = Scheduler(tiny)
    text = tiny.tokenizer.encode('{"name": "bo", "age": x}', add_special_tokens=False)
    params = json_params(schema=SCHEMA)
    steps = [
        e for e in score(tiny, prompt, text, params, scheduler.vocabulary, scheduler.text) if isinstance(e, TokenStep)
    ]
    left = next(i for i, s in enumerate(steps) if s.grammar.left)
    assert "x" not in "".join(s.piece for s in steps[:left]) and "x" in steps[left].piece
    assert steps[left].logprob_at("grammar") == -math.inf
    assert all(not s.grammar.left for s in steps[:left]) and all(s.grammar.left for s in steps[left:])
    # The scored figures are generation's: the same text forced token by token.
    rid = scheduler.continue_output(prompt, [], text[0], params.with_changes(max_tokens=1))
    first = steps_of(run(scheduler), rid)[0]
    assert first.grammar.allowed == steps[0].grammar.allowed
    assert first.grammar.removed_raw == pytest.approx(steps[0].grammar.removed_raw, abs=1e-6)


def test_a_fork_from_a_reply_keeps_the_grammar_it_shares_and_restarts_another(tiny, prompt):
    """``fork_from`` inside a JSON reply, and ``fork_output`` with the carry a stored reply
    gives: a variant with the same schema continues the object (its carried count), a variant
    with a regex starts that regex at the fork."""
    params = json_params(max_tokens=30, temperature=1.0, seed=9)
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(prompt, params)
    steps = steps_of(run(scheduler), rid)
    at = 4
    same, other = scheduler.fork_from(
        rid, at, [params.with_changes(seed=10), params.with_changes(grammar=("regex", "[0-9]{2}"))]
    )
    events = run(scheduler)
    first = steps_of(events, same)[0]
    assert first.grammar.allowed == steps[at].grammar.allowed and not first.grammar.left  # the same state
    head = tiny.tokenizer.decode([s.token_id for s in steps[:at]])
    assert head.startswith("{")  # inside the object: the schema's mask there, not at a start
    eos = tiny.eos_token_ids
    tail = tiny.tokenizer.decode([s.token_id for s in steps_of(events, other) if s.token_id not in eos])
    assert re.fullmatch("[0-9]{2}", tail), tail
    carry = carry_from_steps(steps[:at])
    stored = [params.with_changes(seed=10), params.with_changes(grammar=("regex", "[0-9]{2}"))]
    same, other = scheduler.fork_output(prompt, [s.token_id for s in steps[:at]], stored, carry)
    events = run(scheduler)
    assert steps_of(events, same)[0].grammar.allowed == steps[at].grammar.allowed
    tail = tiny.tokenizer.decode([s.token_id for s in steps_of(events, other) if s.token_id not in eos])
    assert re.fullmatch("[0-9]{2}", tail), tail


def test_with_a_draft_model_the_reply_under_a_grammar_is_the_same(tiny, prompt):
    """The draft proposes through the row's chain, grammar included (its matcher rebuilt from
    the carried count): the model's reply under the grammar is the one it writes alone."""
    params = json_params(max_tokens=30, temperature=0.9, seed=12)
    replies = []
    for draft in (None, tiny):
        scheduler = Scheduler(tiny)
        if draft is not None:
            scheduler.set_draft(draft, 3)
        rid = scheduler.insert(prompt, params)
        steps = steps_of(run(scheduler), rid)
        replies.append([(s.token_id, s.grammar.allowed) for s in steps])
        if draft is not None:
            assert any(s.draft is not None for s in steps)
    assert replies[0] == replies[1]


def test_a_carried_grammar_is_checked_as_a_request_takes_it(tiny, prompt):
    from engine.api.errors import EngineError

    scheduler = Scheduler(tiny)
    params = SamplingParams(grammar=("regex", "[0-9]+"), max_tokens=2)
    for bad in ({"grammar": 3.0}, {"grammar": (("regex", "a(b"), 1)}, {"grammar": (params.grammar, -1)}):
        with pytest.raises(EngineError, match="carry: "):
            scheduler.continue_output(prompt, [], 20, params, bad)
    rid = scheduler.continue_output(prompt, [], 20, params, {"grammar": [list(params.grammar), 0]})
    assert steps_of(run(scheduler), rid)


def test_a_tokenizer_llguidance_cannot_read_refuses_the_grammar_before_anything_starts():
    from engine.sampling.batch import SamplingBatch
    from engine.stages.vocabulary import Vocabulary

    batch = SamplingBatch(Vocabulary(40))  # no tokenizer: nothing to build the grammar's masks from
    with pytest.raises(SamplingParamsError, match="no tokenizer") as caught:
        batch.prepare(SamplingParams(grammar=("regex", "[0-9]+")))
    assert caught.value.field == "grammar"
