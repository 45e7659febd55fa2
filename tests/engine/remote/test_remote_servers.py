"""Server kinds, stage labels, request fields and the wire formats (no network, no model)."""

from __future__ import annotations

import json
import math

import pytest

from engine.api.errors import EngineError

httpx = pytest.importorskip("httpx")

from engine.api.params import DEFAULT_SAMPLERS, LLAMA_CPP_SAMPLERS, SamplingParams  # noqa: E402
from engine.remote.servers import (  # noqa: E402
    KINDS,
    detect_kind,
    logprob_fields,
    refusals,
    sampling_fields,
    stage_for,
    unsupported,
)
from engine.remote.wire import TextDecoder, assign_texts, parse_chunk, vocab_piece_bytes  # noqa: E402


@pytest.mark.parametrize(
    ("owned_by", "server", "props", "kind"),
    [
        ("vllm", "uvicorn", None, "vllm"),
        ("sglang", "uvicorn", None, "sglang"),
        ("llamacpp", "llama.cpp", None, "llama.cpp"),
        ("library", "", None, "ollama"),
        ("organization_owner", "", None, "lmstudio"),
        (None, "BaseHTTP/0.6 Python/3.11.7", None, "mlx_lm"),
        (None, "", {"default_generation_settings": {}}, "llama.cpp"),
        (None, "nginx", None, "openai"),
    ],
)
def test_detect_kind(owned_by, server, props, kind):
    entry = {"id": "m"} | ({"owned_by": owned_by} if owned_by else {})
    assert detect_kind({"data": [entry]}, server, props) == kind


def test_stage_labels_name_what_each_server_reports():
    plain = SamplingParams(temperature=0.7, top_p=0.9)
    pen = plain.with_changes(repetition_penalty=1.3)
    bias = plain.with_changes(logit_bias={5: -3.0})
    greedy = SamplingParams()
    assert stage_for(KINDS["vllm"], "auto", pen) == "raw"
    assert stage_for(KINDS["mlx_lm"], "auto", plain) == "raw"  # no processors: after them is raw
    assert stage_for(KINDS["mlx_lm"], "auto", pen) == "penalties"
    assert stage_for(KINDS["mlx_lm"], "auto", bias) == "bias"
    assert stage_for(KINDS["sglang"], "auto", pen) == "temperature"
    assert stage_for(KINDS["sglang"], "auto", greedy.with_changes(repetition_penalty=1.3)) == "penalties"
    assert stage_for(KINDS["vllm"], "final", plain) == "top_p"
    assert stage_for(KINDS["llama.cpp"], "final", plain.with_changes(samplers=LLAMA_CPP_SAMPLERS)) == "temperature"
    assert stage_for(KINDS["openai"], "penalties", plain) == "raw"


def test_request_fields_per_kind():
    p = SamplingParams(
        temperature=0.8,
        top_k=40,
        top_p=0.9,
        min_p=0.05,
        repetition_penalty=1.2,
        penalty_window=0,
        seed=3,
        stop=("\n",),
        logit_bias={7: -1.0},
        max_tokens=9,
    )
    vllm = sampling_fields(KINDS["vllm"], p, 5)
    assert vllm == {
        "temperature": 0.8,
        "max_tokens": 9,
        "top_p": 0.9,
        "seed": 3,
        "stop": ["\n"],
        "logit_bias": {"7": -1.0},
        "top_k": 40,
        "min_p": 0.05,
        "repetition_penalty": 1.2,
    }
    llama = sampling_fields(KINDS["llama.cpp"], p.with_changes(dry_multiplier=0.8, typical_p=0.9), 5)
    # our 0 = all: -1 only where the server's context is unknown (current servers refuse -1)
    assert llama["repeat_penalty"] == 1.2 and llama["repeat_last_n"] == -1 and llama["dry_penalty_last_n"] == -1
    assert llama["dry_multiplier"] == 0.8 and llama["typical_p"] == 0.9 and "typ_p" in llama["samplers"]
    # only the stages that run are listed: a listed one without its value runs with the
    # server's default (top_k 40, top_p 0.95, min_p 0.05) instead of being off
    assert llama["samplers"] == ["penalties", "dry", "temperature", "top_k", "top_p", "min_p", "typ_p"]
    sized = sampling_fields(KINDS["llama.cpp"], p.with_changes(dry_multiplier=0.8), 5, context=4096)
    assert sized["repeat_last_n"] == 4096 and sized["dry_penalty_last_n"] == 4096  # the whole context
    windowed = p.with_changes(penalty_window=32, dry_multiplier=0.8, dry_penalty_last_n=16)
    sized = sampling_fields(KINDS["llama.cpp"], windowed, 5, context=4096)
    assert sized["repeat_last_n"] == 32 and sized["dry_penalty_last_n"] == 16
    mlx = sampling_fields(KINDS["mlx_lm"], p, 5)
    assert mlx["repetition_context_size"] == 0 and "top_k" in mlx
    openai = sampling_fields(KINDS["openai"], p, 5)
    assert "top_k" not in openai and "repetition_penalty" not in openai
    assert unsupported(KINDS["openai"], p) == ["top_k", "min_p", "repetition_penalty"]
    assert unsupported(KINDS["llama.cpp"], p.with_changes(dry_multiplier=0.8)) == []
    assert logprob_fields(KINDS["vllm"], "text", 5, "auto") == {"logprobs": 5}
    assert logprob_fields(KINDS["vllm"], "chat", 50, "auto") == {"logprobs": True, "top_logprobs": 20}
    assert logprob_fields(KINDS["llama.cpp"], "chat", 5, "final")["post_sampling_probs"] is True
    assert logprob_fields(KINDS["mlx_lm"], "text", 5, "auto") == {"logprobs": True, "top_logprobs": 5}


def test_mirostat_v2_goes_to_llama_cpp_as_its_mirostat_and_is_refused_elsewhere():
    miro = SamplingParams(temperature=0.8, samplers=("temperature", "mirostat_v2"), mirostat_tau=4.0, mirostat_eta=0.2)
    body = sampling_fields(KINDS["llama.cpp"], miro, 5)
    # llama.cpp's common_sampler_init: mirostat 2 = logit bias, temp, mirostat_v2(tau, eta)
    assert (body["mirostat"], body["mirostat_tau"], body["mirostat_eta"]) == (2, 4.0, 0.2)
    assert "mirostat_v2" not in body["samplers"]
    assert unsupported(KINDS["llama.cpp"], miro) == []
    assert unsupported(KINDS["llama.cpp"], miro.with_changes(logit_bias={3: -2.0})) == []
    # the stages llama.cpp's mirostat chain drops are refused, not silently left out
    with_top_k = miro.with_changes(samplers=("top_k", "temperature", "mirostat_v2"), top_k=40)
    assert [b.split()[0] for b in unsupported(KINDS["llama.cpp"], with_top_k)] == ["top_k"]
    assert unsupported(KINDS["llama.cpp"], miro.with_changes(samplers=("mirostat_v2", "temperature")))
    assert unsupported(KINDS["llama.cpp"], miro.with_changes(dynatemp_range=0.5))
    for other in ("vllm", "sglang", "mlx_lm", "lmstudio", "ollama", "openai"):
        assert unsupported(KINDS[other], miro) == ["mirostat_v2 (in samplers)"], other
    assert "mirostat" not in sampling_fields(KINDS["llama.cpp"], SamplingParams(temperature=0.8), 5)


def test_a_grammar_goes_in_each_servers_own_field_and_is_refused_where_it_cannot_go():
    schema = '{"type": "object", "properties": {"a": {"type": "integer"}}}'
    as_schema = SamplingParams(grammar=("json_schema", schema))
    response = {"type": "json_schema", "json_schema": {"name": "logitscope", "schema": json.loads(schema)}}
    for name in ("vllm", "sglang", "lmstudio", "ollama", "openai"):
        assert sampling_fields(KINDS[name], as_schema, 5)["response_format"] == response, name
    llama = sampling_fields(KINDS["llama.cpp"], as_schema, 5)
    assert llama["json_schema"] == json.loads(schema) and "response_format" not in llama
    any_json = SamplingParams(grammar=("json", ""))
    assert sampling_fields(KINDS["vllm"], any_json, 5)["response_format"] == {"type": "json_object"}
    # llama.cpp's /v1/completions (branches, pieces) reads json_schema, not response_format.
    assert sampling_fields(KINDS["llama.cpp"], any_json, 5)["json_schema"] == {"type": "object"}
    assert sampling_fields(KINDS["lmstudio"], any_json, 5)["response_format"]["json_schema"]["schema"] == {
        "type": "object"
    }
    regex = SamplingParams(grammar=("regex", "[0-9]+"))
    assert sampling_fields(KINDS["vllm"], regex, 5)["structured_outputs"] == {"regex": "[0-9]+"}
    assert sampling_fields(KINDS["sglang"], regex, 5)["regex"] == "[0-9]+"
    gbnf = SamplingParams(grammar=("gbnf", 'root ::= "a" | "b"'))
    assert sampling_fields(KINDS["llama.cpp"], gbnf, 5)["grammar"] == 'root ::= "a" | "b"'
    assert sampling_fields(KINDS["sglang"], gbnf, 5)["ebnf"] == 'root ::= "a" | "b"'
    assert sampling_fields(KINDS["vllm"], gbnf, 5)["structured_outputs"] == {"grammar": 'root ::= "a" | "b"'}
    # Listed in samplers or not, the grammar is no llama.cpp sampler: it goes in its own field.
    placed = gbnf.with_changes(samplers=("temperature", "grammar"), temperature=0.5)
    assert sampling_fields(KINDS["llama.cpp"], placed, 5)["samplers"] == ["temperature"]
    # Refused, with what the server takes, where it cannot go; never sent and silently ignored.
    assert [e.field for e in refusals(KINDS["llama.cpp"], regex)] == ["grammar"]
    assert "it takes any JSON object, JSON schema, GBNF grammar" in str(refusals(KINDS["llama.cpp"], regex)[0])
    assert "does not constrain its output" in str(refusals(KINDS["mlx_lm"], any_json)[0])
    lark = SamplingParams(grammar=("lark", "start: /[a-z]+/"))
    assert [bool(refusals(k, lark)) for k in (KINDS["vllm"], KINDS["sglang"], KINDS["lmstudio"])] == [False, True, True]
    assert unsupported(KINDS["openai"], regex) == ["grammar"]


def without(*stages: str) -> tuple[str, ...]:
    return tuple(s for s in DEFAULT_SAMPLERS if s not in stages)


def test_every_refused_field_at_once_and_a_stage_switched_off_is_neither_refused_nor_sent():
    mlx = KINDS["mlx_lm"]
    bad = SamplingParams(temperature=0.8, typical_p=0.9, top_n_sigma=1.5, dry_multiplier=0.8)
    assert [e.field for e in refusals(mlx, bad)] == ["typical_p", "top_n_sigma", "dry_multiplier"]
    assert all("mlx_lm.server does not take" in str(e) for e in refusals(mlx, bad))
    # DRY unticked in the chain editor: its kept multiplier is no refusal, for any kind.
    dry_off = bad.with_changes(samplers=without("dry"))
    assert [e.field for e in refusals(mlx, dry_off)] == ["typical_p", "top_n_sigma"]
    for kind in KINDS.values():
        assert "dry_multiplier" not in unsupported(kind, dry_off), kind.name
    assert refusals(mlx, bad.with_changes(samplers=without("dry", "typical_p", "top_n_sigma"))) == []
    # ... and a switched-off stage's kept values are not sent (the server would apply them).
    kept = SamplingParams(temperature=0.7, top_k=40, top_p=0.9, min_p=0.1, presence_penalty=0.5, repetition_penalty=1.3)
    off = kept.with_changes(samplers=without("top_k", "top_p", "min_p", "penalties", "temperature"))
    for name in ("mlx_lm", "vllm", "llama.cpp"):
        body = sampling_fields(KINDS[name], off, 5)
        assert not {"top_k", "top_p", "min_p", "presence_penalty", "repetition_penalty", "repeat_penalty"} & set(body)
        assert body["temperature"] == 1.0  # temperature off: the plain softmax draw
        assert {"top_k", "top_p", "min_p", "presence_penalty"} <= set(sampling_fields(KINDS[name], kept, 5))
    llama = sampling_fields(KINDS["llama.cpp"], SamplingParams(dry_multiplier=0.8, samplers=without("dry")), 5)
    assert "dry_multiplier" not in llama and "dry" not in llama["samplers"]


def test_vocab_pieces_decode_to_bytes():
    assert vocab_piece_bytes("Ġthe") == b" the"
    assert vocab_piece_bytes("Ċ") == b"\n"
    assert vocab_piece_bytes("▁Hello") == b" Hello"
    assert vocab_piece_bytes("<0x0A>") == b"\n"
    # "é" split over two byte-level tokens comes out whole on the second
    first, second = vocab_piece_bytes("Ã"), vocab_piece_bytes("©")
    dec = TextDecoder()
    assert (dec(first), dec(second)) == ("", "é")


def test_legacy_completions_and_llama_cpp_post_sampling_shapes():
    legacy = parse_chunk(
        {
            "choices": [
                {
                    "text": " a b",
                    "logprobs": {
                        "tokens": [" a", " b"],
                        "token_logprobs": [-0.5, -1.0],
                        "top_logprobs": [{" a": -0.5, " c": -1.5}, {" b": -1.0}],
                    },
                    "finish_reason": None,
                }
            ]
        }
    )
    toks = assign_texts(legacy.entries, legacy.text, TextDecoder())
    assert [t.text for t in toks] == [" a", " b"] and toks[0].top[1].text == " c" and toks[0].token_id is None
    post = parse_chunk(
        {
            "choices": [
                {
                    "delta": {"content": "x"},
                    "logprobs": {
                        "content": [
                            {
                                "id": 9,
                                "token": "x",
                                "bytes": [120],
                                "prob": 1.0,
                                "top_probs": [{"id": 9, "token": "x", "prob": 1.0}, {"id": 4, "token": "y", "prob": 0}],
                            }
                        ]
                    },
                }
            ]
        }
    )
    (tok,) = assign_texts(post.entries, post.text, TextDecoder())
    assert tok.token_id == 9 and tok.logprob == 0.0 and tok.top[1].logprob == -math.inf


def _mlx_transport(replies):
    """mlx_lm.server's non-streamed shape: the entry's own token is the (unordered) top list's first."""
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "/m"}]}, headers={"server": "BaseHTTP/0.6 Python/3.11"})
        body = json.loads(request.content)
        seen.append(body)
        return httpx.Response(200, json=replies["top" if "top_logprobs" in body else "ids"])

    return httpx.MockTransport(handler), seen


def _top(*pairs):
    return [{"id": i, "token": t, "logprob": lp} for i, t, lp in pairs]


def _drive(backend):
    from engine.api.events import Finished, TokenStep

    steps, done = [], None
    while backend.has_work():
        for e in backend.step():
            steps += [e] if isinstance(e, TokenStep) else []
            done = e if isinstance(e, Finished) else done
    return steps, done


def test_a_token_id_the_server_does_not_send_is_none():
    """vLLM's ``token_id:N`` strings and llama.cpp's ``id`` are ids; no id (or a negative
    one) is None, never -1."""
    content = [
        {"token": "token_id:42", "logprob": -0.1, "top_logprobs": [{"token": "token_id:42", "logprob": -0.1}]},
        {"token": " b", "logprob": -0.2, "top_logprobs": [{"token": " b", "logprob": -0.2}]},
        {"id": -1, "token": " c", "logprob": -0.3, "top_logprobs": [{"id": 7, "token": " d", "logprob": -0.5}]},
    ]
    chunk = parse_chunk({"choices": [{"delta": {"content": " b c"}, "logprobs": {"content": content}}]})
    assert [(e.token_id, [a.token_id for a in e.top]) for e in chunk.entries] == [
        (42, [42]),
        (None, [None]),
        (None, [7]),
    ]


def test_mlx_lm_greedy_takes_the_most_likely_of_its_unordered_list():
    from engine.remote.backend import RemoteBackend

    content = [
        dict(_top((260, "Ġthe", -2.7))[0], top_logprobs=_top((260, "Ġthe", -2.7), (7042, "ĠParis", -0.26))),
        dict(_top((13, ".", -1.0))[0], top_logprobs=_top((13, ".", -0.4), (11, ",", -1.2))),
    ]
    reply = {"choices": [{"text": "Paris.", "finish_reason": "length", "logprobs": {"content": content}}]}
    transport, seen = _mlx_transport({"top": reply})
    backend = RemoteBackend("http://mlx", chat=False, transport=transport)
    backend.load("")
    backend.start([{"role": "user", "content": "The capital is"}], SamplingParams(max_tokens=2, top_logprobs=2))
    steps, done = _drive(backend)
    backend.close()
    assert [s.token_id for s in steps] == [7042, 13] and [s.text for s in steps] == [" Paris", "."]
    assert steps[0].logprobs == (-0.26,) and [c.token_id for c in steps[0].top] == [7042, 260]
    assert len(seen) == 1 and seen[0]["prompt"] == "The capital is" and not seen[0].get("stream")
    assert done.text == " Paris."


def test_mlx_lm_sampled_reads_the_chosen_token_from_its_one_reply():
    """One request (engine.remote.chosen): the chosen token is the candidate the reply's
    text goes on with, its id and logprob from the list; no second request to agree with."""
    from engine.remote.backend import RemoteBackend

    top = _top((5, "Ġa", -0.5), (6, "Ġb", -1.0))
    reply = {
        "choices": [{"text": "b", "finish_reason": "length", "logprobs": {"content": [dict(top[0], top_logprobs=top)]}}]
    }
    transport, seen = _mlx_transport({"top": reply})
    backend = RemoteBackend("http://mlx", chat=False, transport=transport)
    backend.load("")
    backend.start([{"role": "user", "content": "x"}], SamplingParams(temperature=1.0, max_tokens=1, top_logprobs=2))
    steps, _ = _drive(backend)
    backend.close()
    assert [s.token_id for s in steps] == [6] and steps[0].logprobs == (-1.0,)
    assert len(seen) == 1 and seen[0]["top_logprobs"] == 10  # the longest list it gives


def test_both_backends_implement_the_interface():
    from engine.api.backend import Backend
    from engine.remote.backend import RemoteBackend
    from engine.session.session import EngineSession

    remote = RemoteBackend("http://127.0.0.1:9")
    assert isinstance(EngineSession(), Backend) and isinstance(remote, Backend)
    assert remote.step() == [] and not remote.has_work() and remote.memory_bytes() == 0
    with pytest.raises(EngineError, match="draft: "):  # before a model: "no model is loaded yet"
        remote.load_draft("default")
    assert remote.draft_model() is None and not remote.capabilities.draft
    from engine.remote.servers import KINDS, remote_capabilities

    for kind in KINDS.values():
        assert "speculative decoding is its own" in remote_capabilities(kind, "final").reason("draft")
    remote.release_draft()
    remote.release_thread()


def test_a_model_named_by_its_file_name_is_the_listed_path():
    """llama.cpp lists its model by the GGUF's full path on its own machine: the file's name,
    with or without ``.gguf``, names it; a name two listed files share names neither."""
    from engine.remote.listing import ServerListing, pick_model
    from engine.remote.wire import RemoteError

    one = ServerListing("llama.cpp", ["/srv/models/SmolLM2.Q4_1.gguf", "/srv/models/Other.gguf"])
    for typed in ("", "SmolLM2.Q4_1.gguf", "SmolLM2.Q4_1", "/srv/models/SmolLM2.Q4_1.gguf"):
        assert pick_model(one, typed, "http://h") == ("/srv/models/SmolLM2.Q4_1.gguf", "")
    two = ServerListing("llama.cpp", ["/a/m.gguf", "/b/m.gguf"])
    with pytest.raises(RemoteError, match="does not serve 'm.gguf'"):
        pick_model(two, "m.gguf", "http://h")
