"""A served request's body, read as the engine takes it: OpenAI's fields, llama.cpp's names for
every stage (a body Logitscope's own remote backend writes for llama.cpp's server reads back
to the same settings), and a 400 naming the field for every wrong one."""

from __future__ import annotations

import json

import pytest

from engine.api.params import LLAMA_CPP_SAMPLERS, SamplingParams
from engine.remote.servers import KINDS, sampling_fields
from engine.serve.request_fields import FieldError, read_request

CHAT = [{"role": "user", "content": "hi"}]


def chat(**fields):
    return read_request({"messages": CHAT, **fields}, chat=True)


def test_openai_fields():
    served = chat(
        temperature=0.7,
        top_p=0.9,
        seed=5,
        max_tokens=33,
        stop="END",
        presence_penalty=0.5,
        frequency_penalty=0.25,
        logit_bias={"12": -100, "40": 2.5},
        logprobs=True,
        top_logprobs=4,
        stream=True,
        stream_options={"include_usage": True},
        response_format={"type": "json_object"},
        user="someone",  # a field no server here reads: left alone
    )
    p = served.params
    assert (p.temperature, p.top_p, p.seed, p.max_tokens, p.stop) == (0.7, 0.9, 5, 33, ("END",))
    assert (p.presence_penalty, p.frequency_penalty, dict(p.logit_bias)) == (0.5, 0.25, {12: -100.0, 40: 2.5})
    assert (served.logprobs, p.top_logprobs, served.stream, served.include_usage) == (4, 4, True, True)
    assert p.grammar == ("json", "") and served.messages == tuple(CHAT)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    assert chat(response_format=fmt).params.grammar == ("json_schema", json.dumps(schema))
    parts = chat(messages=[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])
    assert parts.messages[0]["content"] == "ab"
    text = read_request({"prompt": "Once", "logprobs": 3, "max_tokens": 5}, chat=False)
    assert (text.prompt, text.logprobs, text.params.max_tokens) == ("Once", 3, 5)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repetition_penalty=1.1, penalty_window=64),
        SamplingParams(
            temperature=1.0,
            dry_multiplier=0.8,
            dry_base=1.75,
            dry_allowed_length=2,
            dry_penalty_last_n=128,
            dry_sequence_breakers=("\n", "x"),
            xtc_probability=0.5,
            xtc_threshold=0.1,
            typical_p=0.9,
            top_n_sigma=1.5,
            dynatemp_range=0.3,
            samplers=LLAMA_CPP_SAMPLERS,
        ),
        SamplingParams(temperature=0.8, samplers=("temperature", "mirostat_v2"), mirostat_tau=4.0, mirostat_eta=0.2),
        SamplingParams(temperature=0.8, grammar=("gbnf", 'root ::= "a" | "b"')),
    ],
)
def test_a_body_written_for_llama_cpps_server_reads_back_to_the_same_settings(params):
    """engine.remote.fields writes llama.cpp's names; the server reads them back."""
    body = {"messages": CHAT, **sampling_fields(KINDS["llama.cpp"], params, 5, context=4096)}
    got = read_request(body, chat=True).params
    ours = params.with_changes(top_logprobs=got.top_logprobs, max_tokens=got.max_tokens)
    for field in ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "dry_multiplier", "dry_base"):
        assert getattr(got, field) == getattr(ours, field), field
    for field in ("dry_sequence_breakers", "xtc_probability", "typical_p", "top_n_sigma", "grammar", "mirostat_tau"):
        assert getattr(got, field) == getattr(ours, field), field
    assert [s for s in got.samplers if got.stage_active(s)] == [s for s in ours.samplers if ours.stage_active(s)]


def test_llama_cpp_conventions():
    p = chat(repeat_last_n=-1, repeat_penalty=1.2, n_predict=-1, seed=-1, top_n_sigma=-1, n_probs=7).params
    assert (p.penalty_window, p.repetition_penalty, p.seed, p.top_n_sigma, p.top_logprobs) == (0, 1.2, None, 0.0, 7)
    assert p.max_tokens == 1_000_000  # n_predict -1: until the end (the context stops it)
    off = chat(repeat_last_n=0, repeat_penalty=1.3, presence_penalty=0.4).params
    assert not off.has_penalties  # llama.cpp's window 0: no penalties
    assert chat(logit_bias=[[15, False], [16, 1.5]]).params.logit_bias == {15: -100.0, 16: 1.5}
    assert chat(samplers="top_k;typ_p;temperature", top_k=5).params.samplers == ("top_k", "typical_p", "temperature")
    assert chat(json_schema={"type": "object"}).params.grammar == ("json_schema", '{"type": "object"}')
    assert chat(n_probs=3).llama_cpp_probs and chat(post_sampling_probs=True).post_sampling


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"messages": CHAT, "temperature": "hot"}, "temperature", "must be a number"),
        ({"messages": CHAT, "temperature": -1}, "temperature", "temperature must be in"),
        ({"messages": CHAT, "top_k": 2.5}, "top_k", "must be an integer"),
        ({"messages": CHAT, "samplers": ["top_k", "nucleus"]}, "samplers", "unknown stage 'nucleus'"),
        ({"messages": CHAT, "max_tokens": 10**9}, "max_tokens", "max_tokens must be an integer in"),
        ({"messages": CHAT, "repeat_penalty": 0}, "repeat_penalty", "repetition_penalty"),
        ({"messages": CHAT, "n": 2}, "n", "n must be 1"),
        ({"messages": CHAT, "stop": [1]}, "stop", "stop must be"),
        ({"messages": CHAT, "logit_bias": {"x": 1}}, "logit_bias", "token ids"),
        ({"messages": CHAT, "top_logprobs": 3}, "top_logprobs", "needs logprobs"),
        ({"messages": CHAT, "mirostat": 1}, "mirostat", "Mirostat 1.0"),
        ({"messages": CHAT, "grammar": "root ::= foo"}, "grammar", "cannot be compiled"),
        ({"messages": CHAT, "response_format": {"type": "yaml"}}, "response_format", "type must be"),
        ({"messages": []}, "messages", "non-empty list"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0]", "role"),
        ({"messages": CHAT, "stream": "yes"}, "stream", "true or false"),
        ([1, 2], None, "JSON object"),
    ],
)
def test_a_wrong_field_is_refused_naming_it(body, param, words):
    with pytest.raises(FieldError, match=words) as caught:
        read_request(body, chat=True)
    assert caught.value.param == param


def test_a_field_left_out_or_null_takes_openais_default():
    for fields in ({}, {"temperature": None, "top_p": None, "n": None, "max_tokens": None}):
        params = read_request({"messages": CHAT, **fields}, chat=True, max_tokens_limit=100_000).params
        assert (params.temperature, params.top_p, params.presence_penalty, params.frequency_penalty) == (1.0, 1.0, 0, 0)
        assert not params.greedy and params.max_tokens == 100_000  # the rest of the context, as OpenAI's
        assert (params.top_k, params.min_p, params.seed, params.stop, params.logit_bias) == (0, 0.0, None, (), {})
    assert chat(temperature=0).params.greedy  # asked for: greedy
