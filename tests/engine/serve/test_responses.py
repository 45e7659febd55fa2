"""The served replies' shapes from steps (no server): text held back until the end of the
reply still reaches the client."""

from __future__ import annotations

from dataclasses import replace

from engine.api.events import Finished, FinishReason
from tests.support.chain_steps import chain_step


def test_text_released_with_the_end_of_sequence_token_is_sent_without_the_token():
    from engine.serve.responses import Reply

    step = replace(chain_step(index=0), text="{", piece="{")
    eos = replace(chain_step(index=1), token_id=99, text="\n", piece="")  # held back, released at the end
    done = Finished(0, FinishReason.STOP, 3, 2, 3, 1.0, 1.0, "{\n")
    for chat in (True, False):
        reply = Reply("r", "m", chat, 2, False, False, lambda t: b"x", eos=[99])
        reply.add(step)
        chunk = reply.add(eos)
        assert chunk is not None and chunk["choices"][0]["logprobs"] is None
        sent = chunk["choices"][0]["delta"]["content"] if chat else chunk["choices"][0]["text"]
        assert sent == "\n"
        whole = reply.whole(done)["choices"][0]
        assert (whole["message"]["content"] if chat else whole["text"]) == "{\n"
        logprobs = whole["logprobs"]["content"] if chat else whole["logprobs"]["tokens"]
        assert len(logprobs) == 1  # the end-of-sequence token is not reported
        assert reply.add(replace(eos, text="")) is None
