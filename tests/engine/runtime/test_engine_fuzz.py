"""Stateful fuzzing of the Scheduler: random interleavings of insert, step, cancel,
update_params, branch, continue_output, fork and fork_from (valid and invalid input, ids
that finished, were cancelled or never existed) on tiny models of three cache kinds.

Checked after every rule:
- the only exceptions are the engine's documented ``EngineError`` / ``SamplingParamsError``,
  and a call is accepted exactly when its input is valid (the fuzzer knows which);
- a rejected call changes nothing: a shadow Scheduler that only ever sees the accepted
  calls (with the same seeds) emits the same events, step by step, and reports the same
  ``request_ids()``, ``has_work()`` and next id;
- the events agree with a plain model of every request (indices, positions, the
  parameters in force, forced tokens), every id gets exactly one ``Finished``, and a
  cancel's ``Finished("cancelled")`` comes with the next step.
At the end of each example (teardown) both schedulers are drained; the batch and the
penalty / DRY state are empty, MLX active memory is back to where it started, and every
request's tokens equal a solo replay of it (same seed, same update_params at the same
output indices; a cancelled request's replay is cut at its length).

CI runs a few examples (``FUZZ_EXAMPLES``, ``FUZZ_STEPS`` raise the bounds); ``make fuzz``
runs the long campaign (tests/support/fuzz_campaign.py) and prints its counts. Inputs that hit the
bugs pinned (and fixed) in tests/engine/runtime/test_fuzz_regressions.py are drawn too.
"""

from __future__ import annotations

import functools
import gc
import math
import os
import random
import zlib
from collections import Counter, OrderedDict
from collections.abc import Sequence
from types import SimpleNamespace

import mlx.core as mx
import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import engine.runtime.requests as engine_requests
from engine.api.errors import EngineError
from engine.api.events import Divergence, Finished, PrefillProgress, TokenStep
from engine.api.params import (
    DEFAULT_SAMPLERS,
    LLAMA_CPP_SAMPLERS,
    SAMPLER_STAGES,
    SamplingParams,
    SamplingParamsError,
)
from engine.runtime.scheduler import Scheduler
from tests.support.engine_shadow import (
    ARCHS,
    OUTCOMES,
    REJECTIONS,
    RULE_CALLS,
    Spec,
    describe_mismatch,
    event_key,
    note_rejection,
    replay,
    template,
    tiny_loaded,
    with_context,
)
from tests.support.tiny_model import build_tokenizer

MEMORY_LEFT: list[int] = []
"""MLX active memory left after each example's drain, against its start (bytes)."""
WHY: Counter[str] = Counter()
"""What made the rejected calls invalid, as the fuzzer saw it."""

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))
STEPS = int(os.environ.get("FUZZ_STEPS", "30"))
KNOWN_BUGS = os.environ.get("FUZZ_KNOWN_BUGS", "1") == "1"
"""The bugs pinned in tests/engine/runtime/test_fuzz_regressions.py are fixed: their inputs are drawn (and
checked strictly) unless ``FUZZ_KNOWN_BUGS=0``."""
OPEN_BUGS = os.environ.get("FUZZ_OPEN_BUGS", "1") == "1"  # both fixed: checked by default
"""Bugs pinned as xfail in tests/engine/runtime/test_fuzz_regressions.py (not fixed yet): their checks are
skipped (and counted) unless ``FUZZ_OPEN_BUGS=1``."""
FIRST_DIFFERENCE_PRUNED = True
"""Fixed (tests/engine/runtime/test_fuzz_regressions.py): ForkDivergence.first_difference drops a pair once a member
leaves, so teardown checks that it is empty after the drain."""
REPLAY_FRACTION = float(os.environ.get("FUZZ_REPLAY", "1"))
"""The share of requests replayed solo at the end of an example (chosen by a hash of the
request, so a failing example replays the same ones when Hypothesis shrinks it)."""
MEMORY_SLACK = 16 * 1024
"""Bytes of MLX active memory an example may leave behind (one leaked KV row is ~64 KiB)."""

_TOKENIZER = build_tokenizer()
VOCAB = _TOKENIZER.get_vocab_size() + 3
EOS = _TOKENIZER.token_to_id("<|im_end|>")
SPECIAL = sorted({_TOKENIZER.token_to_id(s) for s in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")} | {VOCAB - 1})

# Strategies ---------------------------------------------------------------------------------

TOKEN = st.integers(0, VOCAB - 1) | st.sampled_from(SPECIAL)
STOPS = ["a", "e", " ", "th", "\n", "é", "zz", "<|im_end|>", "the cat"]
BREAKERS = ["\n", ":", '"', "*", "th", "e", " a", "é", "x" * 40]
SAMPLERS = st.sampled_from([DEFAULT_SAMPLERS, LLAMA_CPP_SAMPLERS]) | st.permutations(SAMPLER_STAGES).flatmap(
    lambda order: st.integers(0, len(order)).map(lambda n: tuple(order[:n]))
)
FIELDS = {
    "temperature": st.sampled_from([0.0, 0.5, 1.0, 2.0, 100.0]) | st.floats(0.0, 3.0),
    "top_k": st.integers(0, 20) | st.sampled_from([300, 1_000_000]),
    "top_p": st.floats(0.0, 1.0, exclude_min=True),
    "min_p": st.floats(0.0, 1.0),
    "repetition_penalty": st.floats(0.0, 3.0, exclude_min=True) | st.just(100.0),
    "presence_penalty": st.floats(-3.0, 3.0) | st.sampled_from([-100.0, 100.0]),
    "frequency_penalty": st.floats(-3.0, 3.0) | st.sampled_from([-100.0, 100.0]),
    "penalty_window": st.integers(0, 40) | st.just(1_000_000),
    "logit_bias": st.dictionaries(TOKEN, st.floats(-100.0, 100.0), max_size=4),
    "seed": st.none() | st.integers(0, 2**63 - 1),
    "max_tokens": st.integers(1, 8) | st.integers(9, 40),
    "stop": st.lists(st.sampled_from(STOPS), max_size=3).map(tuple),
    "top_logprobs": st.integers(0, 5) | st.just(100),
    "samplers": SAMPLERS,
    "typical_p": st.floats(0.0, 1.0, exclude_min=True),
    "top_n_sigma": st.floats(0.0, 4.0) | st.just(100.0),
    "xtc_probability": st.floats(0.0, 1.0),
    "xtc_threshold": st.floats(0.0, 1.0),
    "dry_multiplier": st.floats(0.0, 4.0) | st.just(100.0),
    "dry_base": st.floats(1.0, 4.0) | st.just(100.0),
    "dry_allowed_length": st.integers(1, 4) | st.just(1000),
    "dry_penalty_last_n": st.integers(-1, 40) | st.just(1_000_000),
    "dry_sequence_breakers": st.lists(st.sampled_from(BREAKERS), max_size=4).map(tuple),
    "dynatemp_range": st.floats(0.0, 3.0) | st.just(100.0),
    "dynatemp_exponent": st.floats(0.0, 3.0) | st.just(100.0),
}
_LIMITS = {"max_tokens": FIELDS["max_tokens"]}  # the default 256 only through params=None
VALID_PARAMS = (
    st.fixed_dictionaries(_LIMITS)
    | st.fixed_dictionaries(_LIMITS, optional={"seed": FIELDS["seed"], "temperature": FIELDS["temperature"]})
    | st.fixed_dictionaries(_LIMITS, optional={k: v for k, v in FIELDS.items() if k != "max_tokens"})
).map(lambda kwargs: SamplingParams(**kwargs))

# Values of any type for SamplingParams fields: most are out of range or of the wrong type.
ANY_VALUE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.text(max_size=3),
    st.none(),
    st.booleans(),
    st.lists(st.integers(-2, VOCAB + 2) | st.text(max_size=2), max_size=3),
    st.dictionaries(st.integers(-5, VOCAB + 5) | st.text(max_size=2), st.floats() | st.text(max_size=1), max_size=2),
    st.sampled_from([(), ("top_k", "top_k"), ("bias",), b"", b"ab", "top_k,min_p", ("",), ("x" * 41,)]),
)

WEIRD_IDS = ["0", None, 0.5, -0.5, "x"]
if KNOWN_BUGS:  # tests/engine/runtime/test_fuzz_regressions.py: request ids were not checked
    WEIRD_IDS += [[0], {}, True, False, 0.0, 1.0, 2.0]
WEIRD_POSITIONS = [True, 1.0, None, "1", -0.5]
# numpy integers are token ids (as in prompts and request ids); a numpy array is not.
BAD_TOKENS = [VOCAB, -1, 10**9, True, 2.0, None, "a", np.array([3]), np.int64(VOCAB)]


def dry_overflows(params: SamplingParams) -> bool:
    """DRY's penalty can overflow float32 to inf (multiplier * base ** capped exponent), which
    after a truncation may take a row's last token (an open bug, tests/engine/runtime/test_fuzz_regressions.py)."""
    if not params.has_dry or params.dry_base <= 1.000001:
        return False
    exponent = int(88.7228391 / math.log(params.dry_base))
    return math.log(params.dry_multiplier) + exponent * math.log(params.dry_base) > 88.7228391


def underflows(params: SamplingParams) -> bool:
    """A temperature or repetition penalty so small that the logits divided by it overflow
    float32 (tests/engine/runtime/test_fuzz_regressions.py)."""
    return 0.0 < params.temperature < 1e-30 or params.repetition_penalty < 1e-30


def is_int(value: object) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, np.integer)


def rule_named(name: str):
    """Count the calls of a rule and remember a failure (teardown then skips its checks).
    A call rule (one with ``data``) is followed by 0 to 2 steps, as the app's worker steps
    between the user's actions (and so that examples where Hypothesis's swarm testing
    switched the ``step`` rules off still make progress)."""

    def wrap(function):
        @functools.wraps(function)
        def counted(self, *args, **kwargs):
            RULE_CALLS[name] += 1
            try:
                function(self, *args, **kwargs)
                if "data" in kwargs and self.main is not None and name != "setup":
                    for _ in range(kwargs["data"].draw(st.sampled_from([0, 0, 1, 2]), label="then steps")):
                        self.one_step()
            except BaseException:
                self.failed = True
                raise

        return counted

    return wrap


class Rejected(Exception):
    pass


# The machine ----------------------------------------------------------------------------------


class EngineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.main: Scheduler | None = None
        self.failed = False

    @initialize(
        arch=st.sampled_from(ARCHS),
        context=st.sampled_from([512, 512, 40]),
        max_batch_size=st.sampled_from([1, 2, 3, 4, 16]),
        prefill_chunk=st.sampled_from([1, 2, 3, 5, 8, 128]),
        prefix_cache_entries=st.sampled_from([0, 1, 2, 8]),
        history_records=st.sampled_from([1, 2, 3, 256]),
        sample_ahead=st.booleans(),
        first=st.integers(1, 3),
        data=st.data(),
    )
    @rule_named("setup")
    def setup(self, arch, context, first, data, **config) -> None:
        """A scheduler and its shadow, and ``first`` requests to start with (so that early
        calls have running ids to meet)."""
        self.arch = arch
        self.loaded = with_context(tiny_loaded(arch), context)
        assert self.loaded.vocab_size == VOCAB and self.loaded.eos_token_ids == {EOS}
        self.config = config
        # seed=None draws a seed from the OS (engine.runtime.requests.secrets); here it comes from the
        # example, so that Hypothesis can run an example again and get the same tokens.
        self.saved_secrets = engine_requests.secrets
        engine_requests.secrets = SimpleNamespace(randbits=random.Random(data.draw(st.integers(0, 2**32))).getrandbits)
        mx.clear_cache()
        self.baseline = mx.get_active_memory()
        self.main = Scheduler(self.loaded, **config)
        self.shadow = Scheduler(self.loaded, **config)
        self.specs: dict[int, Spec] = {}
        self.next_id = 0
        self.records: OrderedDict[int, None] = OrderedDict()
        """Ids of ended requests a branch can still reach, oldest first (as the engine keeps them)."""
        self.pending_cancel: set[int] = set()
        for _ in range(first):
            self.insert_call(data)

    # Calls -------------------------------------------------------------------------------

    def call(self, name: str, why_invalid: str | None, on_main, on_shadow):
        """Run ``on_main``; when accepted, ``on_shadow(result)`` too. Raises Rejected when the
        engine rejected the call; fails when the engine's verdict differs from ours."""
        try:
            result = on_main()
        except (EngineError, SamplingParamsError) as error:
            note_rejection(name, error)
            WHY[f"{name}: {template(str(why_invalid))}"] += 1
            assert why_invalid is not None, f"{name} was rejected although its input is valid: {error}"
            raise Rejected from None
        OUTCOMES[f"{name} accepted"] += 1
        assert why_invalid is None, f"{name} was accepted although {why_invalid} (returned {result!r})"
        assert on_shadow(result) == result, f"the shadow scheduler's {name} returned something else"
        return result

    def live_spec(self, request_id) -> Spec | None:
        if not is_int(request_id):
            return None
        spec = self.specs.get(int(request_id))
        return spec if spec is not None and spec.live else None

    def record_spec(self, request_id) -> tuple[Spec | None, str | None]:
        """The request a branch / fork_from of ``request_id`` starts from, or why there is none."""
        if not is_int(request_id):
            return None, f"the id {request_id!r} is not an integer"
        spec = self.specs.get(int(request_id))
        if spec is None:
            return None, f"no request {request_id} was ever made"
        if spec.live:
            return (spec, None) if spec.tokens else (None, f"request {request_id} has no token yet")
        if int(request_id) in self.records:
            return (spec, None) if spec.tokens else (None, f"request {request_id} ended before its first token")
        return None, f"request {request_id} has left the history"

    def add_record(self, request_id: int) -> None:
        self.records[request_id] = None
        while len(self.records) > self.config["history_records"]:
            self.records.popitem(last=False)

    def new_spec(self, rid: int, kind: str, base, earlier, forced, group=None) -> Spec:
        spec = Spec(
            rid, kind, [int(t) for t in base], [int(t) for t in earlier], forced, self.main.params_of(rid), group
        )
        self.specs[rid] = spec
        return spec

    def check_resolved(self, resolved: SamplingParams, given: SamplingParams | None, old_seed: int | None = None):
        given = given if given is not None else SamplingParams()
        if given.seed is None:
            assert resolved.seed is not None
            if old_seed is not None:
                assert resolved.seed == old_seed, "update_params with seed None must keep the request's seed"
            given = given.with_changes(seed=resolved.seed)
        assert resolved == given, f"the engine holds {resolved}, not the {given} it was given"

    # Input strategies (they need the machine's state) -------------------------------------

    def histories(self) -> list[list[int]]:
        return [s.history for s in self.specs.values() if s.history]

    def draw_tokens(self, data, label: str, min_size: int = 1) -> list[int]:
        limit = self.loaded.context_length - 1
        histories = self.histories()
        how = data.draw(st.sampled_from(["fresh", "fresh", "extend", "extend", "long"]), label=f"{label} kind")
        if how == "extend" and histories:
            history = data.draw(st.sampled_from(histories), label=f"{label} from")
            cut = data.draw(st.integers(min(min_size, len(history)), len(history)), label=f"{label} cut")
            tokens = history[:cut] + data.draw(st.lists(TOKEN, max_size=6), label=f"{label} more")
        elif how == "long" and limit < 100:
            tokens = data.draw(st.lists(TOKEN, min_size=limit - 2, max_size=limit), label=f"{label} long")
        else:
            tokens = data.draw(st.lists(TOKEN, min_size=min_size, max_size=16), label=label)
        return tokens[:limit]

    def draw_prompt(self, data, continuation: bool = False, min_size: int = 1):
        """(prompt, why it is invalid or None). ``continuation``: a part of continue_output."""
        context = self.loaded.context_length
        if data.draw(st.integers(0, 7), label="invalid prompt?") == 7:
            bad = [
                ([-1], "a token is negative"),
                ([VOCAB], "a token is beyond the vocabulary"),
                ([1, 10**9], "a token is beyond the vocabulary"),
                ([1, 2.5], "a token is a float"),
                ([1, True], "a token is a bool"),
                ([1, None], "a token is None"),
                ([1, "2"], "a token is a string"),
                ([np.int64(VOCAB)], "a token is beyond the vocabulary"),
                ("abc", "the prompt is a string"),
                (b"ab", "the prompt is bytes"),
                ([1] * context, "it is as long as the context"),
            ]
            if not continuation:
                bad += [
                    ([], "the prompt is empty"),
                    (None, "the prompt is None"),
                    (7, "the prompt is an int"),
                    ({1: 2}, "the prompt is a dict"),
                    (np.array([1, 2]), "the prompt is an ndarray"),
                ]
            if KNOWN_BUGS:
                bad += [([np.array([3])], "a token is an array of one element")]
                if continuation:
                    bad += [
                        (None, "the prompt is None"),
                        (7, "the prompt is an int"),
                        ({1, 2}, "the prompt is a set"),
                        ({1: 2}, "the prompt is a dict"),
                    ]
            return data.draw(st.sampled_from(bad), label="bad prompt")
        tokens = self.draw_tokens(data, "prompt", min_size)
        form = data.draw(st.sampled_from(["list", "list", "tuple", "numpy ints"]), label="prompt form")
        if form == "tuple":
            return tuple(tokens), None
        if form == "numpy ints":
            return [np.int64(t) for t in tokens], None
        return tokens, None

    def draw_params(self, data, allow_none: bool = False):
        """(params, why they are invalid or None)."""
        pick = data.draw(st.integers(0, 11), label="params kind")
        if pick == 11 and (self.loaded.context_length < 100 or not allow_none):
            # SamplingParams() for an insert: up to 256 tokens, so only where the context is short.
            return None, None if allow_none else "the params are None"
        if pick == 10:
            bad = data.draw(st.sampled_from([{"temperature": 1.0}, "hot", 0.5, [SamplingParams()]]), label="bad params")
            return bad, "the params are not SamplingParams"
        params = data.draw(VALID_PARAMS, label="params")
        if pick == 9:
            token = data.draw(st.sampled_from([VOCAB, VOCAB + 1, 10**6]), label="bias id")
            return params.with_changes(logit_bias={**params.logit_bias, token: 1.0}), "a logit_bias id is off the vocab"
        return params, None

    def draw_variants(self, data):
        """(variants, why they are invalid or None)."""
        limit = self.config["max_batch_size"]
        pick = data.draw(st.integers(0, 9), label="variants kind")
        if pick == 9:
            bad = [([], "there are no variants"), (SamplingParams(), "the variants are one SamplingParams")]
            bad += [((p for p in [SamplingParams()]), "the variants are a generator")]
            bad += [([SamplingParams(max_tokens=2)] * (limit + 1), "there are more variants than the batch holds")]
            return data.draw(st.sampled_from(bad), label="bad variants")
        count = data.draw(st.integers(1, min(limit, 4)), label="variant count")
        variants, why = [], None
        for _ in range(count):
            params, bad = (
                self.draw_params(data) if data.draw(st.integers(0, 5)) == 5 else (data.draw(VALID_PARAMS), None)
            )
            variants.append(params)
            why = why or bad
        return (tuple(variants) if data.draw(st.booleans(), label="tuple?") else variants), why

    def draw_target(self, data):
        """A request id: generating, waiting, still in the history, ended, cancelled, never
        made, or not an id."""
        live = [i for i, s in self.specs.items() if s.live]
        kept = [i for i in self.records if self.specs[i].tokens]
        pools = {
            "running": [i for i in live if self.specs[i].tokens],
            "live": live,
            "kept": kept,
            "finished": [i for i, s in self.specs.items() if s.finished is not None and not s.cancelled],
            "cancelled": [i for i, s in self.specs.items() if s.cancelled],
        }
        kinds = ["running"] * 3 + ["live"] * 2 + ["kept"] * 2 + ["finished", "cancelled", "unknown", "weird"]
        kind = data.draw(st.sampled_from(kinds), label="id kind")
        if kind in pools:
            pool = pools[kind] or pools["running"] or live or kept
            if pool:
                target = data.draw(st.sampled_from(pool), label="id")
                return np.int64(target) if data.draw(st.integers(0, 9), label="numpy id?") == 9 else target
        if kind == "weird":
            return data.draw(st.sampled_from(WEIRD_IDS), label="weird id")
        return data.draw(st.sampled_from([self.next_id, self.next_id + 1, -1, 10**12, 2**63]), label="unknown id")

    def draw_position(self, data, spec: Spec | None):
        """(position, why it is invalid or None), for a branch or fork_from of ``spec``."""
        if spec is None:
            return data.draw(st.integers(-1, 6), label="position"), None
        first, last = spec.offset, spec.offset + len(spec.tokens) - 1
        kind = data.draw(st.sampled_from(["in", "in", "in", "first", "last", "below", "above", "weird"]))
        if kind == "in":
            return data.draw(st.integers(first, last), label="position"), None
        if kind in ("first", "last"):
            return (first if kind == "first" else last), None
        if kind == "below":
            return first - 1, "the position is before the output"
        if kind == "above":
            return last + 1, "the position is past the output"
        return data.draw(st.sampled_from(WEIRD_POSITIONS), label="weird position"), "the position is not an int"

    def draw_forced(self, data):
        if data.draw(st.integers(0, 7), label="bad token?") == 7:
            return data.draw(st.sampled_from(BAD_TOKENS), label="bad token"), "the forced token is not a token id"
        return data.draw(TOKEN, label="forced"), None

    # Rules ------------------------------------------------------------------------------------

    @rule(data=st.data())
    @rule_named("insert")
    def insert(self, data) -> None:
        self.insert_call(data)

    def insert_call(self, data) -> None:
        prompt, bad_prompt = self.draw_prompt(data)
        params, bad_params = self.draw_params(data, allow_none=True)
        try:
            rid = self.call(
                "insert",
                bad_prompt or bad_params,
                lambda: self.main.insert(prompt, params),
                lambda rid: self.shadow.insert(prompt, self.main.params_of(rid)),
            )
        except Rejected:
            return
        assert rid == self.next_id, f"insert returned {rid}, the next id is {self.next_id}"
        self.next_id += 1
        spec = self.new_spec(rid, "insert", prompt, [], None)
        self.check_resolved(spec.params, params)

    @rule(data=st.data())
    @rule_named("continue_output")
    def continue_output(self, data) -> None:
        prompt, bad_prompt = self.draw_prompt(data, continuation=True, min_size=0)
        output, bad_output = self.draw_prompt(data, continuation=True, min_size=0)
        forced, bad_forced = self.draw_forced(data)
        params, bad_params = self.draw_params(data)
        why = bad_prompt or bad_output or bad_forced or bad_params or self.bad_length(prompt, output)
        try:
            rid = self.call(
                "continue_output",
                why,
                lambda: self.main.continue_output(prompt, output, forced, params),
                lambda rid: self.shadow.continue_output(prompt, output, forced, self.main.params_of(rid)),
            )
        except Rejected:
            return
        assert rid == self.next_id
        self.next_id += 1
        spec = self.new_spec(rid, "continue", list(prompt), list(output), forced)
        self.check_resolved(spec.params, params)

    @rule(data=st.data())
    @rule_named("fork")
    def fork(self, data) -> None:
        prompt, bad_prompt = self.draw_prompt(data)
        variants, bad_variants = self.draw_variants(data)
        try:
            ids = self.call(
                "fork",
                bad_prompt or bad_variants,
                lambda: self.main.fork(prompt, variants),
                lambda ids: self.shadow.fork(prompt, [self.main.params_of(i) for i in ids]),
            )
        except Rejected:
            return
        self.note_group(ids, variants, "fork", list(prompt), [])

    def note_group(self, ids, variants, kind, base, earlier) -> None:
        assert ids == list(range(self.next_id, self.next_id + len(variants))), f"{kind} returned {ids}"
        self.next_id += len(ids)
        for rid, given in zip(ids, variants, strict=True):
            spec = self.new_spec(rid, kind, base, earlier, None, ids[0] if len(ids) > 1 else None)
            self.check_resolved(spec.params, given)

    @rule(data=st.data())
    @rule_named("fork_from")
    def fork_from(self, data) -> None:
        target = self.draw_target(data)
        source, bad_target = self.record_spec(target)
        position, bad_position = self.draw_position(data, source)
        variants, bad_variants = self.draw_variants(data)
        try:
            ids = self.call(
                "fork_from",
                bad_target or bad_position or bad_variants,
                lambda: self.main.fork_from(target, position, variants),
                lambda ids: self.shadow.fork_from(target, position, [self.main.params_of(i) for i in ids]),
            )
        except Rejected:
            return
        earlier = source.earlier + source.tokens[: position - source.offset]
        self.note_group(ids, variants, "fork_from", source.base, earlier)
        for rid in ids:
            self.specs[rid].earlier_steps = _steps_before(source, position)

    @rule(data=st.data())
    @rule_named("fork_output")
    def fork_output(self, data) -> None:
        prompt, bad_prompt = self.draw_prompt(data, continuation=True, min_size=0)
        output, bad_output = self.draw_prompt(data, continuation=True, min_size=0)
        variants, bad_variants = self.draw_variants(data)
        why = bad_prompt or bad_output or bad_variants or self.bad_length(prompt, output)
        try:
            ids = self.call(
                "fork_output",
                why,
                lambda: self.main.fork_output(prompt, output, variants),
                lambda ids: self.shadow.fork_output(prompt, output, [self.main.params_of(i) for i in ids]),
            )
        except Rejected:
            return
        self.note_group(ids, variants, "fork_from", list(prompt), list(output))

    def bad_length(self, prompt, output) -> str | None:
        if len(prompt) + len(output) == 0:
            return "prompt and output are both empty"
        if len(prompt) + len(output) >= self.loaded.context_length:
            return "prompt + output fill the context"
        return None

    @rule(data=st.data())
    @rule_named("branch")
    def branch(self, data) -> None:
        target = self.draw_target(data)
        source, bad_target = self.record_spec(target)
        position, bad_position = self.draw_position(data, source)
        forced, bad_forced = self.draw_forced(data)
        try:
            rid = self.call(
                "branch",
                bad_target or bad_position or bad_forced,
                lambda: self.main.branch(target, position, forced),
                lambda rid: self.shadow.branch(target, position, forced),
            )
        except Rejected:
            return
        assert rid == self.next_id
        params = source.current
        if source.live:  # the original stops and keeps its tokens
            self.note_cancel(source)
        self.next_id += 1
        earlier = source.earlier + source.tokens[: position - source.offset]
        spec = self.new_spec(rid, "branch", source.base, earlier, forced)
        spec.earlier_steps = _steps_before(source, position)
        assert spec.params == params, "a branch continues with its original's parameters"

    @rule(data=st.data())
    @rule_named("cancel")
    def cancel(self, data) -> None:
        target = self.draw_target(data)
        spec = self.live_spec(target)
        try:
            self.call(
                "cancel",
                None if spec else f"{target!r} is not a running request",
                lambda: self.main.cancel(target),
                lambda _: self.shadow.cancel(target),
            )
        except Rejected:
            return
        self.note_cancel(spec)

    def note_cancel(self, spec: Spec) -> None:
        spec.cancelled = True
        self.pending_cancel.add(spec.id)
        self.add_record(spec.id)

    @rule(data=st.data())
    @rule_named("update_params")
    def update_params(self, data) -> None:
        target = self.draw_target(data)
        spec = self.live_spec(target)
        params, bad_params = self.draw_params(data)
        try:
            self.call(
                "update_params",
                bad_params or (None if spec else f"{target!r} is not a running request"),
                lambda: self.main.update_params(target, params),
                lambda _: self.shadow.update_params(target, params),
            )
        except Rejected:
            return
        resolved = self.main.params_of(spec.id)
        self.check_resolved(resolved, params, old_seed=spec.current.seed)
        assert self.shadow.params_of(spec.id) == resolved
        spec.changes.append((spec.next_index, resolved))

    @rule(kwargs=st.dictionaries(st.sampled_from(sorted(FIELDS)), ANY_VALUE, max_size=3))
    @rule_named("construct_params")
    def construct_params(self, kwargs) -> None:
        """SamplingParams itself: any value of any type is accepted or a SamplingParamsError."""
        try:
            params = SamplingParams(**kwargs)
            params.verify(VOCAB)
        except SamplingParamsError as error:
            note_rejection("SamplingParams", error)
            return
        OUTCOMES["SamplingParams accepted"] += 1
        assert SamplingParams.from_dict(params.to_dict()) == params

    @rule(n=st.integers(1, 4))
    @rule_named("step")
    def step(self, n: int) -> None:
        for _ in range(n):
            self.one_step()

    @rule(drain=st.integers(0, 4))
    @rule_named("step_until_idle")
    def step_until_idle(self, drain: int) -> None:
        """Now and then run every request to its end (then the next calls meet an idle engine)."""
        if drain == 0:
            self.run_until_idle()
        else:
            self.one_step()

    def run_until_idle(self, limit: int = 5000) -> None:
        for _ in range(limit):
            if not self.main.has_work():
                break
            self.one_step()
        assert not self.main.has_work(), f"still working after {limit} steps"

    # Checks -----------------------------------------------------------------------------------

    def one_step(self) -> None:
        events = self.main.step()
        shadow = self.shadow.step()
        ours, theirs = [event_key(e) for e in events], [event_key(e) for e in shadow]
        if ours != theirs:
            first = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None)
            raise AssertionError(
                "the shadow scheduler (which never saw the rejected calls) emitted other events: "
                f"first difference at event {first}:\n  fuzzed: {ours[first] if first is not None else ours}"
                f"\n  shadow: {theirs[first] if first is not None else theirs}"
            )
        for event in events:
            self.check_event(event)
        assert not self.pending_cancel, f"no Finished('cancelled') for {sorted(self.pending_cancel)} in the next step"

    def check_event(self, event) -> None:
        spec = self.specs.get(event.group if isinstance(event, Divergence) else event.request_id)
        assert spec is not None, f"an event for a request never made: {event!r}"
        if isinstance(event, TokenStep):
            assert spec.live, f"a token for request {spec.id} after it ended"
            assert event.index == spec.next_index, f"index {event.index}, expected {spec.next_index}"
            assert event.position == len(spec.history), f"position {event.position}, expected {len(spec.history)}"
            assert event.params == spec.current, "the token was drawn with other parameters than those in force"
            forced = spec.forced is not None and not spec.tokens
            assert event.forced == forced
            if forced:
                assert event.token_id == spec.forced
            assert 0 <= event.token_id < VOCAB and event.chain[0] == "raw"
            self.check_numbers(spec, event)
            spec.tokens.append(event.token_id)
            spec.texts.append(event.text)
            spec.steps.append(event)
        elif isinstance(event, Finished):
            assert spec.finished is None, f"a second Finished for request {spec.id}"
            assert event.finish_reason != "error", f"an exception inside the step ended request {spec.id}: {event}"
            if spec.cancelled:
                assert event.finish_reason == "cancelled", f"cancelled request {spec.id} ended with {event}"
                self.pending_cancel.discard(spec.id)
            else:
                assert event.finish_reason in ("stop", "length"), event
                self.add_record(spec.id)
                self.check_finish_reason(spec, event)
            assert event.generated_tokens == len(spec.tokens)
            assert event.prompt_tokens == len(spec.base) + len(spec.earlier)
            spec.finished = event
            self.check_text(spec, event)
        elif isinstance(event, PrefillProgress):
            assert spec.live and 0 < event.done <= event.total == len(spec.base) + len(spec.earlier), event
        elif isinstance(event, Divergence):
            self.check_divergence(event)

    def check_text(self, spec: Spec, event: Finished) -> None:
        """The text of a reply: the streamed deltas end it, what precedes them is the earlier
        output's text, and a reply that ran to its length or to EOS reads as all its tokens
        decoded in one go."""
        decode = self.main.text.decode
        earlier = decode(spec.earlier)
        whole_chars = earlier.rstrip("\ufffd")  # an incomplete last character may wait for the next token
        streamed = "".join(spec.texts)
        stops = {stop for params in [spec.params, *(p for _, p in spec.changes)] for stop in params.stop}
        if not KNOWN_BUGS and spec.earlier and any(stop in earlier for stop in stops):
            OUTCOMES["text check skipped: a stop string in the earlier output (known bug)"] += 1
            return
        assert event.text.startswith(whole_chars), (
            f"request {spec.id}: its text {event.text!r} does not start with the earlier output {earlier!r} "
            f"(earlier output {spec.earlier}, tokens {spec.tokens}, {event.finish_reason}, stop {event.stop!r})"
        )
        if event.finish_reason == "cancelled":
            return
        if not KNOWN_BUGS and event.finish_reason == "stop" and self.held_at_eos(spec, stops):
            OUTCOMES["text check skipped: text held back when EOS came (known bug)"] += 1
            return
        if not OPEN_BUGS and event.stop in stops and any(p.stop for _, p in spec.changes):
            OUTCOMES["text check skipped: update_params added stop strings (open bug)"] += 1
            return
        head = event.text[: len(event.text) - len(streamed)]
        assert event.text.endswith(streamed) and earlier.startswith(head) and len(head) >= len(whole_chars), (
            f"request {spec.id}: streamed {streamed!r}, text {event.text!r}, earlier output {earlier!r} "
            f"(earlier output {spec.earlier}, tokens {spec.tokens}, {event.finish_reason}, stop {event.stop!r})"
        )
        if event.finish_reason == "length" or event.stop == self.main.text.piece(EOS):
            if not KNOWN_BUGS and event.finish_reason == "stop" and self.held_at_eos(spec, stops):
                OUTCOMES["text check skipped: text held back when EOS came (known bug)"] += 1
                return
            if not KNOWN_BUGS and earlier != whole_chars:
                OUTCOMES["text check skipped: the earlier output ends inside a character (known bug)"] += 1
                return
            tokens = spec.tokens[:-1] if event.finish_reason == "stop" else spec.tokens
            whole = decode(spec.earlier + tokens)
            assert event.text == whole, (
                f"request {spec.id} ({spec.kind}): its text {event.text!r} is not its tokens decoded {whole!r} "
                f"(earlier output {spec.earlier}, tokens {spec.tokens})"
            )

    def held_at_eos(self, spec: Spec, stops: set[str]) -> bool:
        """Whether the reply ended with EOS while text was held back (an incomplete character,
        or what may be the start of a stop string)."""
        if spec.tokens[-1] != EOS:
            return False
        text = self.main.text.decode(spec.earlier + spec.tokens[:-1])
        return text.endswith("\ufffd") or any(text.endswith(s[:n]) for s in stops for n in range(1, len(s)))

    def check_numbers(self, spec: Spec, event: TokenStep) -> None:
        """No NaN in what the inspector shows, whatever the (valid) parameters."""
        numbers = [*event.logprobs, *event.entropies, *(x for c in event.top for x in (c.raw_logit, *c.logprobs))]
        if not any(math.isnan(x) for x in numbers):
            return
        if not KNOWN_BUGS and underflows(event.params):
            OUTCOMES["NaN check skipped: a temperature or repetition penalty below float32 (known bug)"] += 1
            return
        if not OPEN_BUGS and dry_overflows(event.params):
            OUTCOMES["NaN check skipped: DRY's penalty may overflow to inf (open bug)"] += 1
            return
        raise AssertionError(
            f"NaN in the inspection of request {spec.id}'s token {event.index} (chain {event.chain}, "
            f"logprobs {event.logprobs}, entropies {event.entropies}) with {event.params}"
        )

    def check_divergence(self, event: Divergence) -> None:
        """Pairs of live variants of one group, each of which drew its token at ``index`` in
        this step; JS in [0, ln 2]; the first differing index agrees with their tokens."""
        for (a, b), js, first in zip(event.pairs, event.js, event.first_difference, strict=True):
            x, y = self.specs[a], self.specs[b]
            assert a < b and x.group == y.group == event.group, event
            assert x.next_index - 1 == event.index == y.next_index - 1, f"{event} for tokens {x.tokens}, {y.tokens}"
            differ = [x.offset + i for i, (s, t) in enumerate(zip(x.tokens, y.tokens, strict=True)) if s != t]
            assert first == (differ[0] if differ else None), f"{event}: tokens {x.tokens} and {y.tokens}"
            if not (0.0 <= js <= math.log(2) + 1e-5):
                if not KNOWN_BUGS and (underflows(x.current) or underflows(y.current)):
                    OUTCOMES["NaN check skipped: a temperature or repetition penalty below float32 (known bug)"] += 1
                    continue
                if not OPEN_BUGS and (dry_overflows(x.current) or dry_overflows(y.current)):
                    OUTCOMES["NaN check skipped: DRY's penalty may overflow to inf (open bug)"] += 1
                    continue
                raise AssertionError(f"{event}: a Jensen-Shannon divergence outside [0, ln 2]")

    def check_finish_reason(self, spec: Spec, event: Finished) -> None:
        params, last = spec.current, len(spec.tokens) - 1
        if event.finish_reason == "length":
            assert spec.next_index >= params.max_tokens or len(spec.history) >= self.loaded.context_length, (
                f"request {spec.id} ended by length after {len(spec.tokens)} tokens ({params.max_tokens} allowed)"
            )
        elif spec.tokens[last] == EOS:
            assert event.stop == self.main.text.piece(EOS)
        else:
            assert event.stop in params.stop, f"stopped on {event.stop!r}, not one of {params.stop}"

    @invariant()
    def observable_state_agrees(self) -> None:
        if self.main is None:
            return
        try:
            live = {i for i, s in self.specs.items() if s.live}
            assert set(self.main.request_ids()) == live, f"request_ids() {self.main.request_ids()}, running {live}"
            assert self.main.request_ids() == self.shadow.request_ids()
            assert self.main.has_work() == self.shadow.has_work() == bool(live or self.pending_cancel)
            assert self.main.queue.next_id == self.shadow.queue.next_id == self.next_id
        except BaseException:
            self.failed = True
            raise

    def teardown(self) -> None:
        if self.main is None:
            return
        engine_requests.secrets = self.saved_secrets
        if self.failed:
            return
        RULE_CALLS["teardown"] += 1
        self.run_until_idle()
        assert all(s.finished is not None for s in self.specs.values())
        for scheduler in (self.main, self.shadow):
            assert scheduler._active == [] and not scheduler.queue.waiting and not scheduler._pending
            assert scheduler._batch is None and scheduler._lookahead.logits is None
            assert scheduler._lookahead.sampled is None
            assert len(scheduler._sampling) == 0 and scheduler._sampling.states["dry"].rows == []
            counts = scheduler._sampling.states["penalties"]
            assert counts.positions == [] and (counts.device is None or len(counts.device) == 0)
            if FIRST_DIFFERENCE_PRUNED:
                assert scheduler.divergence.first_difference == {}, "divergence state of ended fork groups is kept"
            scheduler.prefix_store.clear()
        mx.clear_cache()
        left = mx.get_active_memory() - self.baseline
        if left > MEMORY_SLACK:  # collect cycles only when needed: a full collection takes ~0.5 s here
            gc.collect()
            mx.clear_cache()
            left = mx.get_active_memory() - self.baseline
        MEMORY_LEFT.append(left)
        assert left <= MEMORY_SLACK, f"{left} bytes of MLX memory still held after every request ended"
        self.check_replays()

    def check_replays(self) -> None:
        for spec in self.specs.values():
            limit = len(spec.tokens) if spec.cancelled else None
            chosen = zlib.crc32(repr((spec.id, spec.base, spec.tokens)).encode()) < REPLAY_FRACTION * 2**32
            if limit == 0 or not chosen:
                continue
            solo = replay(self.loaded, spec, self.config["prefill_chunk"], self.config["sample_ahead"], limit)
            if solo.skipped:
                OUTCOMES[f"replay skipped: {solo.skipped}"] += 1
                continue
            OUTCOMES["replays compared"] += 1
            same = solo.tokens[: len(spec.tokens)] == spec.tokens if spec.cancelled else solo.tokens == spec.tokens
            if same and not spec.cancelled:
                same = solo.finished is not None and solo.finished.finish_reason == spec.finished.finish_reason
            assert same, describe_mismatch(spec, solo, self.main.text.decode)


def _steps_before(source: Spec, position: int) -> list[TokenStep]:
    """The steps of ``source``'s output before ``position``, its own earlier ones first (a
    continue_output's caller-given output has none: the engine started afresh after it)."""
    return (source.earlier_steps or []) + source.steps[: position - source.offset]


def fuzz_settings(examples: int = EXAMPLES, steps: int = STEPS, **overrides) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        **overrides,
    )


def summary(failures: Sequence[str] = ()) -> str:
    lines = [f"rule calls: {sum(v for k, v in RULE_CALLS.items() if k not in ('setup', 'teardown'))}"]
    lines += [f"  {name}: {count}" for name, count in sorted(RULE_CALLS.items())]
    lines += ["outcomes:"] + [f"  {name}: {count}" for name, count in sorted(OUTCOMES.items())]
    lines += [f"distinct rejections: {len(REJECTIONS)} ({sum(REJECTIONS.values())} rejected calls)"]
    lines += [f"  {count:6d}  {message}" for message, count in REJECTIONS.most_common()]
    if MEMORY_LEFT:
        lines += [f"MLX memory left after a drain: max {max(MEMORY_LEFT)} bytes, min {min(MEMORY_LEFT)} bytes"]
    lines += [f"failures found: {len(failures)}"] + [f"  {f}" for f in failures]
    return "\n".join(lines)


def test_engine_fuzz() -> None:
    """The engine's stateful fuzz campaign at the size ``make test`` runs (the long one is ``make fuzz``).

    Slow: each example drives a real scheduler on the tiny model through many rule calls;
    fewer examples stop finding the ordering bugs it exists for."""
    run_state_machine_as_test(EngineMachine, settings=fuzz_settings())
    print("\n" + summary())
