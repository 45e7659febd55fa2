"""The remote backend against llama.cpp's own current server (``xllamacpp``), serving the
default GGUF on 127.0.0.1 for this module: every stage and setting Logitscope sends is
used by the server under its own name (read back from ``/slots``, or ``/completion``'s
echo where ``/slots`` leaves a field out); greedy and seeded replies equal the server's
own replies to the same request sent directly with httpx (not through Logitscope);
post-sampling probabilities read as ``final``; a branch continues a trailing assistant
message; stop strings end the reply; the served model is found without typing its path.
"""

from __future__ import annotations

import json
import math
import time

import pytest

httpx = pytest.importorskip("httpx")

from engine.api.events import Finished, FinishReason, TokenStep  # noqa: E402
from engine.api.params import LLAMA_CPP_SAMPLERS, SamplingParams  # noqa: E402
from tests.support.llamacpp_server import llamacpp_server  # noqa: E402

CHAT = [{"role": "user", "content": "Write one sentence about the sea."}]
N = 12


@pytest.fixture(scope="module")
def server():
    with llamacpp_server() as running:
        yield running


def _backend(server, **kw):
    from engine.remote.backend import RemoteBackend

    backend = RemoteBackend(server.url, timeout=120.0, **kw)
    backend.load("")
    return backend


def _reply(backend, params, messages=CHAT, start=None) -> tuple[list[TokenStep], Finished]:
    started = start() if start is not None else backend.start(messages, params)
    steps, done = [], None
    deadline = time.monotonic() + 120
    while backend.has_work():
        assert time.monotonic() < deadline
        for e in backend.step():
            if isinstance(e, TokenStep) and e.request_id == started.request_id:
                steps.append(e)
            elif isinstance(e, Finished) and e.request_id == started.request_id:
                done = e
    assert done is not None and done.error is None, done
    return steps, done


def _direct(server, body: dict) -> dict:
    """The server's own answer to ``body`` on /v1/chat/completions, not streamed."""
    answer = httpx.post(server.url + "/v1/chat/completions", json={"model": server.model, **body}, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()["choices"][0]


def _slot_params(server) -> dict:
    """The sampling settings llama.cpp used for the last request (``/slots``)."""
    return httpx.get(server.url + "/slots", timeout=10).json()[0]["params"]


def test_the_served_model_is_offered_and_found_by_its_file_name(server):
    from engine.remote.backend import RemoteBackend

    backend = _backend(server)
    assert backend.info.name == server.model and server.model.endswith(".gguf")
    assert backend.info.server == "llama.cpp"
    name = server.model.rsplit("/", 1)[-1]
    for typed in (name, name.removesuffix(".gguf")):
        other = RemoteBackend(server.url)
        assert other.load(typed).name == server.model
    with pytest.raises(Exception, match="does not serve"):
        RemoteBackend(server.url).load("another.gguf")


ALL = "the server's context"
"""Where a window of "all" is expected: llama.cpp takes it as its context, what its old -1 meant."""

# Each case: the settings Logitscope sends, and what llama.cpp must then say it used, under
# llama.cpp's own names (tools/server/README.md), written here from its docs, not from
# ``engine.remote``. llama.cpp ignores a key it does not know, so only reading the settings
# back catches a misnamed field. ``samplers`` is the chain that ran, in its order.
ALL_STAGES = [
    (
        SamplingParams(temperature=0.8, repetition_penalty=1.3, penalty_window=0, seed=3),
        {
            "temperature": 0.8,
            "seed": 3,
            "repeat_penalty": 1.3,
            "repeat_last_n": ALL,
            "samplers": ["penalties", "temperature"],
        },
    ),
    (
        SamplingParams(temperature=0.8, repetition_penalty=1.3, penalty_window=16, seed=3),
        {"repeat_penalty": 1.3, "repeat_last_n": 16, "samplers": ["penalties", "temperature"]},
    ),
    (
        SamplingParams(temperature=0.8, presence_penalty=0.5, frequency_penalty=0.3, logit_bias={13: -5.0}, seed=3),
        {
            "presence_penalty": 0.5,
            "frequency_penalty": 0.3,
            "repeat_penalty": 1.0,
            "logit_bias": [{"bias": -5.0, "token": 13}],
            "samplers": ["penalties", "temperature"],
        },
    ),
    (
        SamplingParams(temperature=0.8, dry_multiplier=0.8, dry_penalty_last_n=-1, seed=3),
        {
            "dry_multiplier": 0.8,
            "dry_base": 1.75,
            "dry_allowed_length": 2,
            "dry_penalty_last_n": ALL,
            "samplers": ["dry", "temperature"],
        },
    ),
    (
        SamplingParams(
            temperature=0.8, dry_multiplier=0.8, dry_penalty_last_n=64, dry_sequence_breakers=("\n",), seed=3
        ),
        {
            "dry_multiplier": 0.8,
            "dry_penalty_last_n": 64,
            "dry_sequence_breakers": ["\n"],
            "samplers": ["dry", "temperature"],
        },
    ),
    (
        SamplingParams(temperature=0.8, top_k=20, top_p=0.9, min_p=0.05, typical_p=0.9, seed=3),
        {
            "top_k": 20,
            "top_p": 0.9,
            "min_p": 0.05,
            "typical_p": 0.9,
            "samplers": ["temperature", "top_k", "top_p", "min_p", "typ_p"],
        },
    ),
    (
        SamplingParams(temperature=0.8, top_n_sigma=1.5, xtc_probability=0.5, xtc_threshold=0.1, seed=3),
        {
            "top_n_sigma": 1.5,
            "xtc_probability": 0.5,
            "xtc_threshold": 0.1,
            "samplers": ["temperature", "top_n_sigma", "xtc"],
        },
    ),
    (
        SamplingParams(temperature=0.8, dynatemp_range=0.3, dynatemp_exponent=1.5, seed=3),
        {"temperature": 0.8, "dynatemp_range": 0.3, "dynatemp_exponent": 1.5, "samplers": ["temperature"]},
    ),
    # llama.cpp's own order: truncation before temperature (Logitscope's default is after).
    (
        SamplingParams(temperature=0.8, top_k=20, min_p=0.05, samplers=LLAMA_CPP_SAMPLERS, seed=3),
        {"top_k": 20, "min_p": 0.05, "samplers": ["top_k", "min_p", "temperature"]},
    ),
    (
        SamplingParams(temperature=1.0, samplers=("mirostat_v2",), mirostat_tau=4.0, mirostat_eta=0.2, seed=3),
        {"temperature": 1.0, "mirostat": 2, "mirostat_tau": 4.0, "mirostat_eta": 0.2},
    ),
]
STAGE_IDS = [
    "repetition",
    "window",
    "presence-frequency-bias",
    "dry-all",
    "dry-breakers",
    "truncation",
    "sigma-xtc",
    "dynatemp",
    "llamacpp-order",
    "mirostat",
]

NOT_IN_SLOTS = ("logit_bias", "dry_sequence_breakers")
"""Settings ``/slots`` leaves out: read from ``/completion``'s echo of the same fields."""


class _Recording(httpx.AsyncHTTPTransport):
    """The transport Logitscope's requests go through, keeping each POST's JSON body."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict] = []

    async def handle_async_request(self, request):
        if request.method == "POST":
            self.bodies.append(json.loads(request.content))
        return await super().handle_async_request(request)


def _echoed_settings(server, body: dict) -> dict:
    """The settings llama.cpp parses from ``body``'s sampling fields, as ``/completion`` echoes
    them (``generation_settings``, with the fields ``/slots`` leaves out); the same parser
    reads them for ``/v1/chat/completions``."""
    skip = ("model", "messages", "stream", "stream_options", "max_tokens", "logprobs", "top_logprobs")
    fields = {k: v for k, v in body.items() if k not in skip}
    answer = httpx.post(server.url + "/completion", json={**fields, "prompt": "hi", "n_predict": 1}, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()["generation_settings"]


@pytest.mark.parametrize("case", ALL_STAGES, ids=STAGE_IDS)
def test_every_stage_logitscope_sends_is_used_under_llamacpps_names(server, case):
    params, expected = case
    recorder = _Recording()
    steps, done = _reply(_backend(server, transport=recorder), params.with_changes(max_tokens=3, top_logprobs=3))
    assert len(steps) == 3 and done.finish_reason == FinishReason.LENGTH
    used = _slot_params(server)  # what the request just served ran with
    (body,) = [b for b in recorder.bodies if "messages" in b]
    echoed = _echoed_settings(server, body) if any(k in expected for k in NOT_IN_SLOTS) else {}
    for name, want in expected.items():
        want = server.context if want is ALL else want
        got = echoed[name] if name in NOT_IN_SLOTS else used[name]
        if isinstance(want, float):
            assert got == pytest.approx(want), f"llama.cpp used {name}={got}, Logitscope asked for {want}"
        else:
            assert got == want, f"llama.cpp used {name}={got!r}, Logitscope asked for {want!r}"


def test_a_kind_given_by_the_user_still_reads_the_context(server):
    """With the kind named (no detection), ``/props`` is still asked for the context."""
    params = SamplingParams(repetition_penalty=1.3, penalty_window=0, max_tokens=2)
    steps, _ = _reply(_backend(server, kind="llama.cpp"), params)
    assert len(steps) == 2 and _slot_params(server)["repeat_last_n"] == server.context


def test_a_greedy_reply_is_the_servers_own(server):
    steps, done = _reply(_backend(server), SamplingParams(max_tokens=N, top_logprobs=5))
    own = _direct(server, {"messages": CHAT, "temperature": 0.0, "max_tokens": N, "logprobs": True, "top_logprobs": 5})
    assert "".join(s.text for s in steps) == own["message"]["content"]
    theirs = own["logprobs"]["content"]
    assert [s.token_id for s in steps] == [t["id"] for t in theirs]
    for step, tok in zip(steps, theirs, strict=True):
        assert step.reported_stage == "raw"
        assert step.logprob_at("raw") == pytest.approx(tok["logprob"], abs=1e-4)
    assert done.finish_reason == FinishReason.LENGTH


def test_a_seeded_reply_in_logitscopes_order_is_the_servers_own(server):
    params = SamplingParams(temperature=1.2, top_k=50, top_p=0.95, repetition_penalty=1.1, seed=11, max_tokens=N)
    steps, _ = _reply(_backend(server), params)
    # The same request written by hand, as llama.cpp documents its fields: Logitscope's
    # chain order (temperature before truncation), its seed, a window of all the context.
    own = _direct(
        server,
        {
            "messages": CHAT,
            "temperature": 1.2,
            "top_k": 50,
            "top_p": 0.95,
            "repeat_penalty": 1.1,
            "repeat_last_n": server.context,
            "seed": 11,
            "samplers": ["penalties", "temperature", "top_k", "top_p"],
            "max_tokens": N,
        },
    )
    assert [s for s in params.samplers if s in ("penalties", "top_k", "top_p", "temperature")] == [
        "penalties",
        "temperature",
        "top_k",
        "top_p",
    ]
    assert "".join(s.text for s in steps) == own["message"]["content"]
    again, _ = _reply(_backend(server), params)
    assert [s.token_id for s in again] == [s.token_id for s in steps]


def test_post_sampling_probabilities_read_as_final(server):
    params = SamplingParams(temperature=0.9, top_k=3, seed=5, max_tokens=6, top_logprobs=5)
    steps, _ = _reply(_backend(server, stage="final"), params)
    own = _direct(
        server,
        {
            "messages": CHAT,
            "temperature": 0.9,
            "top_k": 3,
            "seed": 5,
            "samplers": ["temperature", "top_k"],
            "max_tokens": 6,
            "logprobs": True,
            "top_logprobs": 5,
            "post_sampling_probs": True,
        },
    )
    theirs = own["logprobs"]["content"]
    assert [s.token_id for s in steps] == [t["id"] for t in theirs]
    for step, tok in zip(steps, theirs, strict=True):
        assert step.reported_stage == "top_k" and step.chain == ("top_k",)  # the last stage of the chain
        assert math.exp(step.logprob_at("top_k")) == pytest.approx(tok["prob"], abs=1e-4)
        # after top_k 3 only three tokens are left, and their probabilities sum to 1
        kept = [math.exp(c.logprobs[0]) for c in step.top if c.logprobs[0] is not None and c.logprobs[0] > -math.inf]
        assert len(kept) <= 3 and sum(kept) == pytest.approx(1.0, abs=1e-3)


def test_a_branch_continues_a_trailing_assistant_message(server):
    backend = _backend(server)
    greedy = SamplingParams(max_tokens=N)
    steps, _ = _reply(backend, greedy)
    text = [s.text for s in steps]
    # Branch after four tokens, forcing the fifth: the rest is the greedy reply's rest.
    branch, _ = _reply(
        backend,
        greedy,
        start=lambda: backend.continue_reply(
            CHAT,
            [s.token_id for s in steps[:4]],
            steps[4].token_id,
            greedy,
            output_text="".join(text[:4]),
            forced_text=text[4],
        ),
    )
    # The branch's steps are the forced token (output index 4) and what the server added.
    assert [s.index for s in branch[:2]] == [4, 5] and branch[0].text == text[4]
    assert "".join(s.text for s in branch) == "".join(text[4:])
    own = _direct(
        server,
        {
            "messages": [*CHAT, {"role": "assistant", "content": "".join(text[:5])}],
            "temperature": 0.0,
            "max_tokens": N - 5,
        },
    )
    # Not streamed, llama.cpp answers with the continued message whole, prefix included.
    assert "".join(text[:5]) + "".join(s.text for s in branch[1:]) == own["message"]["content"]


def test_a_stop_string_ends_the_reply_as_the_server_does(server):
    steps, done = _reply(_backend(server), SamplingParams(max_tokens=40, stop=(" the",)))
    own = _direct(server, {"messages": CHAT, "temperature": 0.0, "max_tokens": 40, "stop": [" the"]})
    assert own["finish_reason"] == "stop", "the default model's greedy reply must contain the stop string"
    assert done.finish_reason == FinishReason.STOP
    assert done.text == own["message"]["content"] and " the" not in done.text


def test_the_default_models_template_has_no_reasoning(server):
    """Reasoning output cannot be checked here: SmolLM2's chat template has no thinking
    part, and llama.cpp says so (no reasoning support in its template caps)."""
    props = httpx.get(server.url + "/props", timeout=10).json()
    assert "<think>" not in props["chat_template"]
    assert not props["chat_template_caps"].get("supports_reasoning_effort")
    steps, _ = _reply(_backend(server), SamplingParams(max_tokens=4))
    assert all(s.phase is None for s in steps)


def test_the_connect_dialog_offers_the_served_model(server, qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from app.views.connect_dialog import ConnectDialog

    dialog = ConnectDialog(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(dialog)
    dialog.url.setText(server.url)
    dialog.key_kind.setCurrentIndex(0)  # no API key
    dialog.show()  # its busy bar is visible only while it probes
    dialog.probe()
    qtbot.waitUntil(lambda: not dialog.probing, timeout=30_000)
    assert dialog.error.text() == ""
    assert dialog.model.currentText() == server.model
    assert "llama.cpp" in dialog.server_label.text()
    assert dialog.spec().model == server.model


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_a_schema_and_a_gbnf_grammar_constrain_the_servers_reply_and_its_logprobs_are_from_before_the_mask(server):
    """The grammar goes in llama.cpp's own fields (``json_schema``, ``grammar``); its reply
    follows it; its logprobs are the model's own (``engine.remote.structured.BEFORE_MASK``):
    at the first token, where the schema allows only an opening brace, the reported
    candidates still hold other tokens; a regex, which it cannot take, is refused."""
    import json

    import jsonschema

    from engine.api.errors import EngineError

    backend = _backend(server)
    try:
        ask = [{"role": "user", "content": "Describe a person as JSON."}]
        params = SamplingParams(max_tokens=60, top_logprobs=5, grammar=("json_schema", json.dumps(PERSON)))
        steps, done = _reply(backend, params, messages=ask)
        jsonschema.validate(json.loads(done.text), PERSON)
        assert any(c.text.strip() and not c.text.strip().startswith("{") for c in steps[0].top), steps[0].top
        _, done = _reply(backend, SamplingParams(max_tokens=8, grammar=("gbnf", 'root ::= "yes" | "no"')))
        assert done.text in ("yes", "no")
        with pytest.raises(EngineError, match="does not take a regex: it takes any JSON object, JSON schema"):
            backend.start(CHAT, SamplingParams(grammar=("regex", "[0-9]+")))
    finally:
        backend.close()
