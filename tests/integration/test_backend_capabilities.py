"""Both backends behind one protocol, with the capabilities each declares, and no fakes:
the local engine on the tiny model, the remote backend against a real ``mlx_lm.server``
serving the same folder on 127.0.0.1. A server's fork is emulated (one stream per
variant) behind the same ``fork`` / ``fork_reply`` calls; what it cannot do raises with
the reason its capabilities give."""

from __future__ import annotations

import inspect

import pytest

httpx = pytest.importorskip("httpx")

from engine.api.backend import Backend  # noqa: E402
from engine.api.capabilities import NAMES, Capabilities  # noqa: E402
from engine.api.errors import EngineError  # noqa: E402
from engine.api.events import Divergence, Finished, TokenStep  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.support.local_server import mlx_lm_server  # noqa: E402

CHAT = [{"role": "user", "content": "hello there"}]
PROTOCOL_CALLS = [
    name for name, _ in inspect.getmembers(Backend, predicate=inspect.isfunction) if not name.startswith("_")
]


@pytest.fixture(scope="module")
def server(tiny_folder, tmp_path_factory):
    with mlx_lm_server(tiny_folder, tmp_path_factory.mktemp("mlx-server")) as url:
        yield url


@pytest.fixture(scope="module")
def local(tiny_folder):
    from engine.session.session import EngineSession

    session = EngineSession()
    session.load(str(tiny_folder))
    return session


@pytest.fixture
def remote(server, tiny_folder):
    from engine.remote.backend import RemoteBackend

    backend = RemoteBackend(server, chat_template=str(tiny_folder))  # continues replies from text
    backend.load("")
    yield backend
    backend.close()


def run(backend, limit: float = 60.0) -> list:
    import time

    events, deadline = [], time.monotonic() + limit
    while backend.has_work():
        assert time.monotonic() < deadline, "the backend did not finish in time"
        events.extend(backend.step())
    return events


def test_the_protocol_declares_every_call_the_worker_makes():
    calls = ("start", "continue_reply", "fork", "fork_reply", "score_text", "replay", "check_fidelity")
    for call in (*calls, "load_second", "compare_reply", "compare_text", "release_second"):
        assert call in PROTOCOL_CALLS
    assert isinstance(Backend.__dict__["capabilities"], property)
    source = inspect.getsource(__import__("app.shell.engine_thread.worker", fromlist=["x"]))
    for banned in ("hasattr(", "is_remote_session", "start_remote", "._begin("):
        assert banned not in source, banned


def test_a_capability_that_is_off_says_why():
    caps = Capabilities(fork=True, reasons=(("score", "needs a local model."),))
    assert caps.reason("fork") == "" and caps.reason("score") == "needs a local model."
    assert caps.reason("replay")  # off with no sentence given: still a reason
    assert "fork" not in caps.missing() and "score" in caps.missing()
    with pytest.raises(KeyError):
        caps.reason("teleport")


def test_local_engine_declares_everything_but_the_network(local):
    assert isinstance(local, Backend)
    caps = local.capabilities
    assert local.info.capabilities == caps
    assert caps.missing() == ("network",)
    assert all(hasattr(local, call) for call in PROTOCOL_CALLS)
    # What it declares works: scoring yields steps with the whole chain.
    steps = [e for e in local.score_text("hello there friend", SamplingParams()) if isinstance(e, TokenStep)]
    assert steps and all(s.chain[0] == "raw" and s.reported_stage is None for s in steps)


def test_remote_backend_declares_what_a_server_does(remote):
    assert isinstance(remote, Backend)
    caps = remote.capabilities
    assert remote.info.capabilities == caps
    assert caps.fork and caps.network
    assert set(caps.missing()) == set(NAMES) - {"fork", "network"}
    assert "penalties" in caps.reason("full_chain")  # the stage mlx_lm.server reports
    refused = [("score_text", "score"), ("replay", "replay"), ("check_fidelity", "fidelity")]
    refused += [("load_second", "compare_models"), ("compare_text", "compare_models")]
    refused += [("lens_reply", "logit_lens"), ("lens_text", "logit_lens")]
    for call, name in refused:
        with pytest.raises(EngineError) as err:
            getattr(remote, call)("text", SamplingParams())
        assert caps.reason(name) in str(err.value)
    assert all(hasattr(remote, call) for call in PROTOCOL_CALLS)


def test_remote_fork_through_the_protocol(remote):
    greedy = SamplingParams(max_tokens=5, top_logprobs=3)
    sampled = SamplingParams(max_tokens=5, top_logprobs=3, temperature=1.5, seed=7)
    started = remote.fork(CHAT, [greedy, sampled])
    ids = [s.request_id for s in started]
    assert len(set(ids)) == 2
    events = run(remote)
    assert not any(isinstance(e, Divergence) for e in events)  # capabilities.divergence is off
    for rid, params in zip(ids, (greedy, sampled), strict=True):
        steps = [e for e in events if isinstance(e, TokenStep) and e.request_id == rid]
        done = [e for e in events if isinstance(e, Finished) and e.request_id == rid]
        assert len(done) == 1 and done[0].error is None, done
        assert 1 <= len(steps) <= 5 and all(s.params.temperature == params.temperature for s in steps)
        assert all(s.reported_stage == s.chain[0] for s in steps)

    # "Compare from here": each variant continues the first reply's text after token 2.
    first = [e for e in events if isinstance(e, TokenStep) and e.request_id == ids[0]]
    if len(first) < 3:
        pytest.skip("the tiny model ended its reply before token 2")
    prefix = "".join(s.text for s in first[:2])
    again = remote.fork_reply(CHAT, [0, 0], [greedy, sampled], output_text=prefix)
    events = run(remote)
    for s in again:
        steps = [e for e in events if isinstance(e, TokenStep) and e.request_id == s.request_id]
        assert steps and steps[0].index == 2


def test_remote_fork_starts_nothing_when_one_variant_is_refused(remote):
    bad = SamplingParams(max_tokens=3, typical_p=0.5)  # mlx_lm.server does not take typical_p
    with pytest.raises(EngineError):
        remote.fork(CHAT, [SamplingParams(max_tokens=3), bad])
    assert not remote.has_work()
