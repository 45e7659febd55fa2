"""The remote backend against a small stand-in server (real HTTP on 127.0.0.1): faults,
live changes, cancellation, and what goes into the requests. Fast; no model."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")

from engine.api.errors import EngineError  # noqa: E402
from engine.api.events import Finished, TokenStep  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from engine.remote.backend import RemoteBackend, RemoteError, RemoteFinished  # noqa: E402

MODELS = ["ok", "cut", "bad", "nolog", "stall", "slow", "midbad", "together", "held"]
HANG_GUARD_S = 30.0
"""How long the stand-in holds a reply for an event that never comes: a hang guard, far over
the milliseconds the awaited event takes on a busy machine."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args: Any) -> None:
        pass

    def _json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": m, "owned_by": "vllm"} for m in MODELS]})
        else:
            self._json(404, {"error": "not found"})

    def _send(self, obj: Any) -> None:
        self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
        self.wfile.flush()

    def _token(self, i: int, logprobs: bool = True) -> dict[str, Any]:
        text = f" t{i}"
        choice: dict[str, Any] = {"index": 0, "delta": {"content": text}, "finish_reason": None}
        if logprobs:
            top = [{"token": f" t{i}", "logprob": -0.1, "bytes": list(text.encode())}]
            top.append({"token": " x", "logprob": -2.5, "bytes": [32, 120]})
            choice["logprobs"] = {
                "content": [{"token": text, "logprob": -0.1, "bytes": list(text.encode()), "top_logprobs": top}]
            }
        return {"choices": [choice]}

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((dict(self.headers), body))  # type: ignore[attr-defined]
        model = body.get("model")
        if model == "bad":
            self._json(400, {"error": {"message": "top_logprobs must be at most 20, got 50", "type": "BadRequest"}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        msgs = body.get("messages", [])
        start = msgs[-1]["content"].count(" t") if msgs and msgs[-1]["role"] == "assistant" else 0
        n = body["max_tokens"]
        if model == "nolog":
            self._send(self._token(0, logprobs=False))
            return
        if model == "together":
            # Held until every request of the test's barrier is open at once: a client that
            # sends them one after another breaks it (after the hang guard) and gets an error.
            try:
                self.server.together.wait()  # type: ignore[attr-defined]
            except threading.BrokenBarrierError:
                self._send({"error": {"message": "the requests were never open at once"}})
                return
        if model == "midbad":
            self._send(self._token(0))
            self._send({"error": {"message": "engine died"}})
            return
        for i in range(start, start + n):
            if model == "cut" and i == 2:
                return  # the connection closes mid-reply, no finish, no [DONE]
            if model == "stall" and i == 1:
                # Held until the test lets go (the hang guard at most): only the client's own
                # timeout ends its wait.
                self.server.let_go.wait(HANG_GUARD_S)  # type: ignore[attr-defined]
                return
            if model == "slow":
                time.sleep(0.05)
            if model == "held" and i == 3:
                # Three tokens out, then held until the test lets go (the hang guard at most):
                # whatever the test does then happens mid-reply, however slow the machine.
                self.server.held.wait(HANG_GUARD_S)  # type: ignore[attr-defined]
            try:
                self._send(self._token(i))
            except OSError:
                return  # the client went away
        self._send({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        self._send({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": n}})
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture(scope="module")
def standin():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.requests = []  # type: ignore[attr-defined]
    server.let_go = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _url(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def _drive(backend, until=None, limit=10.0):
    events, deadline = [], time.monotonic() + limit
    while backend.has_work():
        assert time.monotonic() < deadline, f"hang guard: the backend did not finish in {limit} s"
        events += backend.step()
        if until is not None and until(events):
            break
    return events


def _backend(server, model="ok", **kw) -> RemoteBackend:
    backend = RemoteBackend(_url(server), **kw)
    backend.load(model)
    return backend


MSG = [{"role": "user", "content": "hi"}]


def _finished(events) -> RemoteFinished:
    (done,) = [e for e in events if isinstance(e, Finished)]
    return done


def test_a_reply_streams_with_logprobs_and_unreported_fields_stay_empty(standin):
    backend = _backend(standin, timeout=5)
    try:
        assert backend.info.server == "vllm" and backend.info.reported_stage == "raw"
        backend.start(MSG, SamplingParams(max_tokens=3, top_logprobs=2))
        events = _drive(backend)
    finally:
        backend.close()
    steps = [e for e in events if isinstance(e, TokenStep)]
    assert [s.text for s in steps] == [" t0", " t1", " t2"] and [s.index for s in steps] == [0, 1, 2]
    s = steps[0]
    assert s.chain == ("raw",) and s.reported_stage == "raw" and s.logprobs == (-0.1,)
    assert s.entropies == (None,) and s.survivors == (None,)  # not reported: None, never NaN or -1
    assert s.token_id is None and s.position is None  # vLLM sends no ids unless asked: not reported
    assert [c.token_id for c in s.top] == [None, None]
    assert [c.text for c in s.top] == [" t0", " x"] and s.top[0].raw_logit is None and s.top[0].count is None
    done = _finished(events)
    assert done.finish_reason == "length" and done.text == " t0 t1 t2" and done.prompt_tokens == 7
    _, body = standin.requests[-1]
    assert body["stream"] and body["logprobs"] is True and body["top_logprobs"] == 2
    assert body["stream_options"] == {"include_usage": True} and body["temperature"] == 0.0


def test_cli_prints_null_for_what_the_server_does_not_report(standin, capsys):
    from engine.cli.main import main

    assert main(["generate", "--server", _url(standin), "--model", "ok", "--prompt", "hi", "--max-tokens", "2"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    tok, done = records[0], records[-1]
    assert tok["token_id"] is None and tok["entropy"] is None and tok["survivors"] == {"raw": None}
    assert [c["token_id"] for c in tok["top"]] == [None, None]  # null, never -1
    assert tok["top"][0]["raw_logit"] is None and tok["logprob"] == tok["raw_logprob"] == -0.1
    assert done["finish_reason"] == "length" and done["prefilled_tokens"] is None and done["prompt_tps"] is None


def test_refused_connection_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = RemoteBackend(f"http://127.0.0.1:{port}", retries=0)
    with pytest.raises(RemoteError, match="cannot connect to http://127.0.0.1"):
        backend.load("m")
    backend.close()


def test_cli_refused_connection_prints_one_error_line(capsys):
    from engine.cli.main import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["generate", "--server", f"http://127.0.0.1:{port}", "--prompt", "x"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot connect to")


def test_a_stream_cut_mid_reply_keeps_the_tokens_that_arrived(standin):
    backend = _backend(standin, "cut", timeout=5)
    try:
        backend.start(MSG, SamplingParams(max_tokens=6))
        events = _drive(backend)
    finally:
        backend.close()
    assert [e.text for e in events if isinstance(e, TokenStep)] == [" t0", " t1"]
    done = _finished(events)
    assert done.finish_reason == "error" and done.text == " t0 t1" and done.generated_tokens == 2
    assert isinstance(done.exception, RemoteError) and "before the reply finished" in done.error
    assert "The reply was cut after 2 tokens: all 2 are kept." in done.error  # says what is kept


def test_a_400_carries_the_servers_message(standin, capsys):
    from engine.cli.main import main

    backend = _backend(standin, "bad", timeout=5)
    try:
        backend.start(MSG, SamplingParams(max_tokens=3))
        done = _finished(_drive(backend))
    finally:
        backend.close()
    assert done.finish_reason == "error" and done.exception.status == 400
    assert done.exception.server_message == "top_logprobs must be at most 20, got 50"
    assert "400" in str(done.error) and "top_logprobs must be at most 20" in str(done.error)
    assert main(["generate", "--server", _url(standin), "--model", "bad", "--prompt", "x"]) == 1
    out = capsys.readouterr()
    assert json.loads(out.out.splitlines()[-1])["finish_reason"] == "error"
    assert out.err.strip().splitlines() == [f"error: {done.error}"]


def test_an_error_sent_mid_stream_is_reported(standin):
    backend = _backend(standin, "midbad", timeout=5)
    try:
        backend.start(MSG, SamplingParams(max_tokens=3))
        events = _drive(backend)
    finally:
        backend.close()
    done = _finished(events)
    assert done.text == " t0" and "engine died" in str(done.error)


def test_a_server_that_ignores_logprobs_is_an_error_not_a_guess(standin):
    backend = _backend(standin, "nolog", timeout=5)
    try:
        backend.start(MSG, SamplingParams(max_tokens=3))
        events = _drive(backend)
    finally:
        backend.close()
    assert not [e for e in events if isinstance(e, TokenStep)]
    done = _finished(events)
    assert done.finish_reason == "error" and "ignores `logprobs`" in str(done.error)


def test_a_stalled_stream_times_out(standin):
    """The stand-in holds the reply after one token until the test lets go: only the
    client's 0.5 s timeout can end it (else _drive's hang guard fails the test)."""
    backend = _backend(standin, "stall", timeout=0.5)
    try:
        backend.start(MSG, SamplingParams(max_tokens=3))
        t0 = time.monotonic()
        events = _drive(backend)
        waited = time.monotonic() - t0
    finally:
        standin.let_go.set()
        backend.close()
    done = _finished(events)
    assert done.text == " t0" and "sent nothing for 0.5 s" in str(done.error)
    assert waited >= 0.5  # a 0.5 s timeout cannot fire sooner (no speed asked)
    assert "The reply was cut after 1 token: it is kept." in str(done.error)


def test_a_live_change_continues_from_the_text_so_far(standin):
    """The reply is held after three tokens until the change is made: it lands mid-reply."""
    standin.held = threading.Event()
    backend = _backend(standin, "held", timeout=HANG_GUARD_S)
    try:
        rid = backend.start(MSG, SamplingParams(max_tokens=12, top_logprobs=1)).request_id
        events = _drive(backend, until=lambda ev: sum(isinstance(e, TokenStep) for e in ev) >= 3)
        n_before = len(standin.requests)
        backend.update_params(rid, SamplingParams(max_tokens=12, temperature=0.5, top_logprobs=1))
        standin.held.set()
        events += _drive(backend)
    finally:
        standin.held.set()
        backend.close()
    steps = [e for e in events if isinstance(e, TokenStep)]
    assert [s.index for s in steps] == list(range(12))
    assert [s.text for s in steps] == [f" t{i}" for i in range(12)]
    switched = next(i for i, s in enumerate(steps) if s.params.temperature == 0.5)
    assert switched >= 3 and all(s.params.temperature == 0.5 for s in steps[switched:])
    _, body = standin.requests[n_before]
    prefix = "".join(s.text for s in steps[:switched])
    assert body["messages"][-1] == {"role": "assistant", "content": prefix}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["temperature"] == 0.5 and body["max_tokens"] == 12 - switched
    assert _finished(events).text == "".join(s.text for s in steps)


def test_cancel_closes_the_request_and_branching_sends_the_text(standin):
    backend = _backend(standin, "slow", timeout=5)
    try:
        rid = backend.start(MSG, SamplingParams(max_tokens=200)).request_id
        _drive(backend, until=lambda ev: any(isinstance(e, TokenStep) for e in ev))
        backend.cancel(rid)
        events = _drive(backend)
        assert _finished(events).finish_reason == "cancelled"
        n = len(standin.requests)
        started = backend.continue_reply(
            MSG, [None, None], None, SamplingParams(max_tokens=4), output_text=" t0 t1", forced_text=" t2"
        )
        events = _drive(backend)
    finally:
        backend.close()
    assert started.prompt_tokens == ()
    steps = [e for e in events if isinstance(e, TokenStep)]
    assert steps[0].forced and steps[0].index == 2 and steps[0].text == " t2" and steps[0].top == ()
    assert [s.text for s in steps[1:]] == [" t3"] and _finished(events).text == " t0 t1 t2 t3"
    assert standin.requests[n][1]["messages"][-1]["content"] == " t0 t1 t2"


def test_compare_runs_streams_concurrently(standin):
    """The stand-in answers none of the four until all four are open at once (a barrier):
    requests sent one after another never get there and fail (no timing asked)."""
    standin.together = threading.Barrier(4, timeout=HANG_GUARD_S / 6)  # under _drive's guard
    backend = _backend(standin, "together", timeout=HANG_GUARD_S)
    try:
        ids = [backend.start(MSG, SamplingParams(max_tokens=10, seed=i)).request_id for i in range(4)]
        events = _drive(backend, limit=HANG_GUARD_S)
    finally:
        backend.close()
    assert not standin.together.broken, "the four requests were never open at once"
    for rid in ids:
        assert [e.index for e in events if isinstance(e, TokenStep) and e.request_id == rid] == list(range(10))


def test_api_key_is_sent_but_never_shown(standin, monkeypatch):
    monkeypatch.setenv("LOGITSCOPE_TEST_KEY", "sk-secret-123")
    backend = _backend(standin, api_key_env="LOGITSCOPE_TEST_KEY", timeout=5)
    try:
        backend.start(MSG, SamplingParams(max_tokens=1))
        _drive(backend)
        assert "sk-secret" not in repr(backend) and "sk-secret" not in repr(backend.info)
    finally:
        backend.close()
    headers, _ = standin.requests[-1]
    assert headers["Authorization"] == "Bearer sk-secret-123"
    with pytest.raises(EngineError, match="LOGITSCOPE_MISSING_KEY is not set"):
        RemoteBackend(_url(standin), api_key_env="LOGITSCOPE_MISSING_KEY")


def test_settings_the_server_cannot_apply_are_refused_before_sending(standin):
    backend = _backend(standin, timeout=5)
    try:
        with pytest.raises(EngineError, match="vLLM does not take dry_multiplier"):
            backend.start(MSG, SamplingParams(dry_multiplier=0.8))
        assert not backend.has_work()
    finally:
        backend.close()


def _reply(backend, params: SamplingParams) -> list[TokenStep]:
    backend.start(MSG, params)
    return [e for e in _drive(backend) if isinstance(e, TokenStep)]


def test_token_ids_a_server_does_not_send_stay_none_through_the_codec_the_store_and_exports(standin, tmp_path):
    """The stand-in is a vLLM look-alike: text, no ids. The ids are None on the steps and
    their candidates, ``null`` in every record, None again once read back from the store
    and from an export, and empty cells in the CSV (whose ``chosen`` then goes by text)."""
    import csv

    from app.store.export import from_records, read_jsonl, write
    from app.store.export_store import from_store
    from app.store.serialize import steps_from_json, steps_to_json
    from app.store.store import Store
    from engine.api.codec import CLI, EXPORT, STORE, decode_step, encode_step

    backend = _backend(standin, timeout=5)
    try:
        steps = _reply(backend, SamplingParams(max_tokens=3, top_logprobs=2))
    finally:
        backend.close()

    def ids(steps_):
        return [(s.token_id, [c.token_id for c in s.top]) for s in steps_]

    assert ids(steps) == [(None, [None, None])] * 3
    for style in (CLI, EXPORT, STORE):
        record = json.loads(json.dumps(encode_step(steps[0], style, steps[0].params.to_dict()), allow_nan=False))
        assert record["token_id"] is None and [c["token_id"] for c in record["top"]] == [None, None]
        back = decode_step(record, steps[0].params)
        assert ids([back]) == ids(steps[:1]) and back.logprobs == steps[0].logprobs
    assert ids(steps_from_json(steps_to_json(steps))) == ids(steps)

    store = Store(tmp_path / "db.sqlite3")
    try:
        conv = store.writes.new_conversation("", "ids")
        user = store.writes.add_user_message(conv.id, "hi", None)
        reply = store.writes.add_assistant_message(conv.id, user.id)
        store.writes.add_branch(reply.id, steps, "".join(s.text for s in steps), "length", "ok", steps[0].params)
        saved = store.reads.thread(conv.id)[-1].branch
        assert saved is not None and ids(saved.steps) == ids(steps)
        assert [s.text for s in saved.steps] == [s.text for s in steps]
        data = from_store(store, conv.id)
    finally:
        store.close()
    write(data, tmp_path / "e.jsonl")
    tokens = [r for r in read_jsonl(tmp_path / "e.jsonl") if r["type"] == "token"]
    assert [r["token_id"] for r in tokens] == [None] * 3 and all(
        c["token_id"] is None for r in tokens for c in r["top"]
    )
    imported = from_records(read_jsonl(tmp_path / "e.jsonl")).messages[-1].branches[0].steps
    assert ids(imported) == ids(steps)
    write(data, tmp_path / "e.csv")
    with open(tmp_path / "e.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 * 2 and all(r["token_id"] == "" and r["candidate_id"] == "" for r in rows)
    assert [r["candidate_text"] for r in rows if r["chosen"] == "1"] == [" t0", " t1", " t2"]


def test_a_branch_from_a_candidate_without_an_id_continues_from_its_text(standin, tmp_path):
    """The model layer and the worker's own start, against the stand-in (a vLLM look-alike
    that sends no ids); only the Qt hop between them is left out. A picked candidate
    without an id becomes a ``ChatJob`` whose ``ForcedToken`` has no id and the candidate's
    text; ``EngineWorker._start`` hands it to ``RemoteBackend.continue_reply``, and the
    server is sent the reply's text so far and then the candidate's."""
    from app.model.chat import ChatModel
    from app.model.jobs import ChatJob, ForcedToken
    from app.shell.engine_thread.worker import EngineWorker
    from app.store.compare_runs import branch_key
    from app.store.store import Store

    store = Store(tmp_path / "db.sqlite3")
    model = ChatModel(store)
    jobs: list[ChatJob] = []
    model.events.job_submitted.connect(jobs.append)
    backend = _backend(standin, timeout=5)

    def run(job: ChatJob) -> None:
        (started,) = EngineWorker._start(backend, job)
        model.generation.on_job_started(job.tag, started.request_id, len(started.prompt_tokens))
        for event in _drive(backend):
            if isinstance(event, TokenStep):
                model.generation.on_token(job.tag, event)
            elif isinstance(event, Finished):
                model.generation.on_finished(job.tag, event)

    params = SamplingParams(max_tokens=3, top_logprobs=2)
    try:
        assert model.generation.send("hi", params)
        run(jobs[-1])
        (message,) = [m for m in model.thread if m.role == "assistant"]
        first = message.branch
        assert [s.text for s in first.steps] == [" t0", " t1", " t2"]
        assert all(s.token_id is None for s in first.steps)
        model.select((branch_key(first.id), 1))
        other = next(c for c in first.steps[1].top if c.text == " x")
        assert other.token_id is None
        assert model.generation.pick_token(other.token_id, params, forced_text=other.text)
        job = jobs[-1]
        assert job.forced == ForcedToken(None, " x") and job.output == (None,) and job.output_text == " t0"
        n = len(standin.requests)
        run(job)
    finally:
        backend.close()
    body = standin.requests[n][1]
    assert body["messages"][-1] == {"role": "assistant", "content": " t0 x"} and body["max_tokens"] == 1
    branch = message.branches[-1]
    assert [s.text for s in branch.steps] == [" t0", " x", " t1"]  # the stand-in counts the " t"s it was sent
    assert branch.steps[1].forced and branch.steps[1].token_id is None
    # Saved and read back: the forced token's id is still "not reported".
    reopened = ChatModel(store)
    assert reopened.open_conversation(model.conversation.id)
    saved = reopened.thread[-1].branches[-1].steps
    assert [(s.token_id, s.text, s.forced) for s in saved[:2]] == [(None, " t0", False), (None, " x", True)]
    store.close()


def test_a_branch_without_an_id_is_refused_by_the_local_engine_with_the_reason():
    pytest.importorskip("mlx.core")
    from engine.runtime.prompts import token_ids
    from engine.session.session import EngineSession

    assert token_ids([3, 4]) == [3, 4]
    with pytest.raises(EngineError, match="token 1 of the reply has none"):
        token_ids([3, None])
    session = EngineSession()  # the checks come before the model is needed
    with pytest.raises(EngineError, match="the picked token has none"):
        session.continue_reply(MSG, [3], None, SamplingParams(), forced_text=" x")
    with pytest.raises(EngineError, match="token 0 of the reply has none"):
        session.continue_reply(MSG, [None], 5, SamplingParams(), output_text=" t0")
