"""Which token mlx_lm.server drew, read from one reply's text and top lists
(``engine.remote.chosen``): exact where the text says so, *not reported* where it cannot,
never a guess passed off as the server's choice. No network, no model."""

from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.remote.chosen import chosen_from_text
from engine.remote.wire import TextDecoder, WireAlt, WireEntry, assign_texts

IDS: dict[str, int] = {}


def alt(text: str, logprob: float) -> WireAlt:
    token_id = IDS.setdefault(text, len(IDS) + 1)
    return WireAlt(token_id, text, logprob, text.encode())


def entry(*alts: WireAlt) -> WireEntry:
    # mlx_lm.server's entry is merely its list's first: never the chosen token's own.
    first = alts[0]
    return WireEntry(first.token_id, first.raw, first.logprob, tuple(alts))


def read(entries, text: str, keep: int = 10):
    got = chosen_from_text(entries, text, keep)
    texts = [t.text for t in assign_texts(got, text, TextDecoder())]
    # The tokens' texts add up to the server's; the first keeps the leading space mlx-lm
    # drops, as the local engine's does.
    assert "".join(texts).removeprefix(" ") == text
    return [(e.token_id, None if math.isnan(e.logprob) else e.logprob) for e in got], texts


def test_every_token_in_its_list_is_read_exactly_even_a_long_shot():
    entries = [
        entry(alt(" The", -0.2), alt(" A", -1.9)),
        entry(alt(" ocean", -2.3), alt(" sea", -0.4), alt(" se", -3.0)),  # " se" fits the text too
        entry(alt(" is", -0.5), alt("wards", -2.0), alt("a", -4.0)),
        entry(alt(".", -0.1), alt("!", -2.0)),
    ]
    ids, texts = read(entries, "The sea is.")  # mlx-lm drops the reply's leading space
    assert ids == [(IDS[" The"], -0.2), (IDS[" sea"], -0.4), (IDS[" is"], -0.5), (IDS["."], -0.1)]
    assert texts == [" The", " sea", " is", "."]


def test_a_token_drawn_from_outside_its_list_is_not_reported_and_reading_goes_on():
    entries = [
        entry(alt(" The", -0.2)),
        entry(alt(" sea", -0.4), alt(" ocean", -1.0)),  # drawn: " wind", not in the list
        entry(alt(" blows", -0.5), alt(" is", -0.9)),
        entry(alt(".", -0.1), alt("!", -2.0)),
    ]
    ids, texts = read(entries, "The wind blows.")
    # " The" ends where a space follows: no token is " The wind".
    assert ids == [(IDS[" The"], -0.2), (None, None), (IDS[" blows"], -0.5), (IDS["."], -0.1)]
    assert texts == [" The", " wind", " blows", "."]
    entries = [
        entry(alt(" The", -0.2)),
        entry(alt(" un", -0.4), alt(" old", -1.0)),
        entry(alt("known", -0.3), alt("til", -1.1)),  # drawn: "forg", not in the list
        entry(alt("ettable", -0.2), alt("otten", -0.9)),
        entry(alt(".", -0.1)),
    ]
    ids, texts = read(entries, "The unforgettable.")
    # " un" might be the start of a longer token outside the list (" unfor"): not reported,
    # though shown as its text where its list says so.
    assert ids == [(IDS[" The"], -0.2), (None, None), (None, None), (IDS["ettable"], -0.2), (IDS["."], -0.1)]
    assert texts == [" The", " un", "forg", "ettable", "."]


def test_a_longer_token_outside_the_list_is_not_passed_off_as_a_listed_prefix():
    entries = [
        entry(alt(" the", -0.3), alt(" a", -1.2)),  # drawn: " there", whose text starts like " the"
        entry(alt(" is", -0.2), alt(" are", -1.5)),
        entry(alt(" more", -0.7)),
    ]
    ids, texts = read(entries, "there is more")
    assert ids == [(None, None), (IDS[" is"], -0.2), (IDS[" more"], -0.7)]
    assert texts == ["there", " is", " more"]


def test_two_ids_with_one_text_are_not_told_apart_and_the_end_token_says_nothing():
    twin = WireAlt(999, " sea", -1.1, b" sea")
    entries = [
        entry(alt(" The", -0.2)),
        entry(alt(" sea", -0.4), twin),
        entry(alt(".", -0.1)),
        entry(alt("<|im_end|>", -0.05), alt("\n", -3.0)),  # finish "stop": not in the text
    ]
    ids, texts = read(entries, "The sea.")
    assert ids == [(IDS[" The"], -0.2), (None, None), (IDS["."], -0.1), (None, None)]
    assert texts == [" The", " sea", ".", ""]


def test_each_entry_keeps_its_most_likely_candidates_and_the_chosen_one():
    many = [alt(f" w{k}", -0.1 * k) for k in range(1, 10)]
    entries = [entry(*many), entry(alt(".", -0.1))]
    (got, _) = chosen_from_text(entries, "w7.", keep=3)
    assert [a.text for a in got.top] == [" w1", " w2", " w3", " w7"]
    assert got.token_id == IDS[" w7"] and math.isclose(got.logprob, -0.7)


# Through the backend, against a stand-in for mlx_lm.server whose draws change from one
# request to the next, as after its prompt cache warmed up --------------------------------

REPLIES = [  # what each request draws: (token, its list as (token, logprob), ...)
    [(" The", [(" The", -0.2), (" A", -1.9)]), (" sea", [(" ocean", -0.9), (" sea", -0.6)]), (".", [(".", -0.1)])],
    [(" The", [(" The", -0.2), (" A", -1.9)]), (" wind", [(" ocean", -0.9), (" sea", -0.6)]), (".", [(".", -0.1)])],
]
VOCAB = {" The": 1, " A": 2, " ocean": 3, " sea": 4, ".": 5, " wind": 6}


class _MlxLike(BaseHTTPRequestHandler):
    """mlx_lm.server's shapes (0.32): ``top_logprobs`` given, each entry is its unordered
    list's first; absent, the chosen tokens' ids. Python's http.server, as mlx_lm.server."""

    def log_message(self, *args) -> None:
        pass

    def _json(self, obj) -> None:
        data = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._json({"object": "list", "data": [{"id": "m", "object": "model"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        posts = self.server.posts  # type: ignore[attr-defined]
        drawn = REPLIES[min(len(posts), len(REPLIES) - 1)]
        posts.append(body)
        if body.get("top_logprobs"):
            content = []
            for _, top in drawn:
                items = [{"id": VOCAB[t], "token": t.replace(" ", "Ġ"), "logprob": lp} for t, lp in top]
                content.append(dict(items[0], top_logprobs=items))
        else:
            content = [{"id": VOCAB[t], "logprob": -1.0} for t, _ in drawn]
        text = "".join(t for t, _ in drawn).lstrip(" ")  # mlx-lm drops the leading space
        choice = {"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": text}}
        choice["logprobs"] = {"content": content}
        usage = {"prompt_tokens": 5, "completion_tokens": len(drawn), "total_tokens": 5 + len(drawn)}
        self._json({"object": "chat.completion", "choices": [choice], "usage": usage})


def test_a_sampled_reply_is_one_request_whatever_a_second_would_draw():
    from engine.api.events import Finished, TokenStep
    from engine.api.params import SamplingParams
    from engine.remote.backend import RemoteBackend

    server = ThreadingHTTPServer(("127.0.0.1", 0), _MlxLike)
    server.posts = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    backend = RemoteBackend(f"http://127.0.0.1:{server.server_address[1]}")
    try:
        assert backend.load("m").server == "mlx_lm"
        rid = backend.start([{"role": "user", "content": "hi"}], SamplingParams(temperature=0.8, seed=3, max_tokens=3))
        events, deadline = [], time.monotonic() + 10
        while backend.has_work():
            assert time.monotonic() < deadline
            events += backend.step()
    finally:
        backend.close()
        server.shutdown()
        server.server_close()
    (done,) = [e for e in events if isinstance(e, Finished) and e.request_id == rid.request_id]
    steps = [e for e in events if isinstance(e, TokenStep)]
    assert done.error is None, done.error
    assert len(server.posts) == 1 and server.posts[0]["top_logprobs"] == 10  # the longest list it gives
    assert [(s.token_id, s.logprobs[0]) for s in steps] == [(1, -0.2), (4, -0.6), (5, -0.1)]
    assert "".join(s.text for s in steps) == " The sea."


def test_a_chosen_token_not_reported_reads_so_in_the_chain_table(qtbot):
    """Its probability is unknown, not 0: the chain table says so in its cell."""
    pytest.importorskip("PySide6")
    from PySide6.QtCore import Qt

    from app.model.remote_labels import NOT_REPORTED
    from app.views.chain_view import ChainModel
    from app.views.theme import LIGHT
    from engine.api.params import SamplingParams
    from engine.remote.events import RemoteRequest, token_step
    from engine.remote.wire import WireToken

    request = RemoteRequest(0, (), SamplingParams(temperature=1.0, top_logprobs=2), "", 0)
    listed = (WireAlt(1, " The", -0.2, b" The"), WireAlt(2, " A", -1.9, b" A"))
    step = token_step(request, WireToken(None, " Sea", " Sea", math.nan, listed), "raw")
    model = ChainModel()
    model.set_step(step, LIGHT, False)
    cells = {c.text: model.data(model.index(r, 0), Qt.ItemDataRole.DisplayRole) for r, c in enumerate(model.candidates)}
    assert cells[" Sea"] == NOT_REPORTED and cells[" The"] != NOT_REPORTED
