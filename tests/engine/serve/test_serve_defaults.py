"""A request that leaves a field out gets OpenAI's default for it (``OPENAI_DEFAULTS`` in
``engine.serve.request_fields``), over plain HTTP with the tiny model: no ``temperature`` is
temperature 1.0, sampled (not greedy), as the engine samples it here at 1.0."""

from __future__ import annotations

from engine.api.params import SamplingParams
from tests.engine.serve.serving import CHAT, local, post


def test_requests_without_temperature_are_sampled_at_openais_default(served, tiny_folder):
    asked = []
    submit = served.engine.submit

    def recording(request, sink):
        asked.append(request.params)
        return submit(request, sink)

    served.engine.submit = recording  # read per request by the application
    try:
        texts = []
        for seed in (1, 2, 3):
            answer = post(served.url + "/chat/completions", {"messages": CHAT, "max_tokens": 12, "seed": seed})
            assert answer.status_code == 200, answer.text
            texts.append(answer.json()["choices"][0]["message"]["content"])
    finally:
        served.engine.submit = submit
    assert [(p.temperature, p.top_p, p.presence_penalty, p.frequency_penalty) for p in asked] == [(1.0, 1.0, 0, 0)] * 3
    assert not any(p.greedy for p in asked)
    for seed, text in zip((1, 2, 3), texts, strict=True):
        steps = local(tiny_folder, SamplingParams(max_tokens=12, temperature=1.0, seed=seed))
        assert text == "".join(s.text for s in steps)
    assert len(set(texts)) > 1  # three seeds, three draws: not one greedy reply


def test_a_request_without_max_tokens_may_fill_the_context(served):
    asked = []
    submit = served.engine.submit

    def recording(request, sink):
        asked.append(request.params)
        return submit(request, sink)

    served.engine.submit = recording
    try:
        answer = post(served.url + "/chat/completions", {"messages": CHAT})
        assert answer.status_code == 200, answer.text
    finally:
        served.engine.submit = submit
    assert asked[0].max_tokens == served.session.info.context_length  # OpenAI's and llama.cpp's: no cap
