"""The Qt-free model layer (``app.model``): conversations, many live replies, compare runs
and selection by stable ids, driven with synthetic worker events; no Qt, no engine."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from app.model.chat import ChatModel
from app.model.chat_events import ChatEvents
from app.model.events import EventEmitter, EventGroup
from app.model.jobs import ChatJob, ForcedToken, ForkJob
from app.store.compare_runs import DivergenceSeries, branch_key
from app.store.store import Store
from engine.api.events import Candidate, Divergence, Finished, TokenStep
from engine.api.params import SamplingParams
from tests.support.paths import ROOT

GREEDY = SamplingParams(max_tokens=8)
VARIANTS = [
    ("Greedy", SamplingParams(max_tokens=8)),
    ("Hot", SamplingParams(temperature=1.5, seed=1, max_tokens=8)),
    ("Top-k", SamplingParams(temperature=0.8, top_k=5, seed=2, max_tokens=8)),
]


def step(index: int, token: int = 5, params: SamplingParams = GREEDY, logprob: float = -0.5) -> TokenStep:
    chain = ("raw", "temperature")
    lps = (logprob - 0.1, logprob)
    return TokenStep(
        request_id=0,
        index=index,
        position=10 + index,
        token_id=token,
        text=f" t{token}",
        piece=f" t{token}",
        chain=chain,
        logprobs=lps,
        entropies=(1.0, 0.8),
        survivors=(100, 100),
        top=(Candidate(token, f" t{token}", 2.0, lps, None, 0.0, 0.0, 0),),
        params=params,
    )


def finished(text: str = "done", reason: str = "length", generated: int = 4) -> Finished:
    return Finished(0, reason, 10, generated, 10, 100.0, 10.0, text)


class Recorder:
    """Every event the model emits, in order."""

    def __init__(self, events: EventGroup) -> None:
        self.seen: list[tuple] = []
        for name in events.names:
            getattr(events, name).connect(lambda *args, n=name: self.seen.append((n, *args)))

    def of(self, name: str) -> list[tuple]:
        return [e[1:] for e in self.seen if e[0] == name]


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "db.sqlite3")
    yield store
    store.close()


def stream_reply(model: ChatModel, tag: int, tokens: list[int], start: int = 0) -> None:
    model.generation.on_job_started(tag, 100 + tag, 12)
    for i, token in enumerate(tokens):
        model.generation.on_token(tag, step(start + i, token))


class _Changes(EventGroup):
    changed: EventEmitter[[int]]


def test_events_connect_block_and_disconnect_their_owner():
    events = _Changes()
    seen = []

    class View:
        def on_changed(self, value):
            seen.append(value)

    view = View()
    events.changed.connect(view.on_changed)
    events.changed(1)
    with events.changed.blocker():
        events.changed(2)
    events.disconnect_owner(view)
    events.changed(3)
    assert seen == [1]
    with pytest.raises(AttributeError):
        _ = events.missing


def test_declared_events_are_their_own_per_group_in_order_and_an_undeclared_one_is_missing():
    class Shown(EventGroup):
        changed: EventEmitter[[int]]
        closed: EventEmitter[[]]

    class More(Shown):
        moved: EventEmitter[[int, int]]

    first, second = More(), More()
    assert first.names == ("changed", "closed", "moved") and first.changed is not second.changed
    seen = []

    class View:
        def on_changed(self, value):
            seen.append(("view", value))

    view = View()
    first.changed.connect(view.on_changed)
    first.changed.connect(lambda value: seen.append(("lambda", value)))
    first.changed(1)
    second.changed(9)  # another group's emitter: nobody listens
    with first.changed.blocker():
        first.changed(2)
    first.disconnect_owner(view)
    first.changed(3)
    assert seen == [("view", 1), ("lambda", 1), ("lambda", 3)]
    with pytest.raises(AttributeError):
        _ = first.missing
    assert "selection_changed" in ChatEvents().names and "errored" in ChatEvents().names


def test_a_reply_streams_is_saved_and_the_selection_follows_it_by_id(store):
    model = ChatModel(store)
    seen = Recorder(model.events)
    assert [e.role for e in model.entries] == ["welcome"]
    assert model.generation.send("hello", GREEDY)
    (job,) = seen.of("job_submitted")
    (job,) = job
    assert isinstance(job, ChatJob) and job.messages[-1] == {"role": "user", "content": "hello"}
    assert [e.role for e in model.entries] == ["system", "user", "assistant"]
    assert model.busy() and not model.generation.send("again", GREEDY)  # one turn at a time
    stream_reply(model, job.tag, [7, 8, 9])
    key = ("reply", job.tag)
    assert seen.of("tokens_added") == [(key,)] * 3
    # Following the newest token while it streams.
    assert model.selection == (key, 2)
    model.generation.on_finished(job.tag, finished(" t7 t8 t9"))
    (message,) = [m for m in model.thread if m.role == "assistant"]
    branch = message.branch
    assert [s.token_id for s in branch.steps] == [7, 8, 9]
    assert seen.of("stream_renamed") == [(key, branch_key(branch.id))]
    assert model.selection == (branch_key(branch.id), 2) and not model.busy()
    assert model.entries[-1].stream == branch_key(branch.id) and model.entries[-1].note == "[length]"
    # A saved conversation reopens the same.
    other = ChatModel(store)
    assert other.open_conversation(model.conversation.id)
    assert [s.token_id for s in other.entries[-1].steps] == [7, 8, 9]


def test_many_live_replies_and_a_selection_that_survives_inserts_and_deletes(store):
    model = ChatModel(store)
    seen = Recorder(model.events)
    model.generation.send("first", GREEDY)
    tag = seen.of("job_submitted")[-1][0].tag
    stream_reply(model, tag, [1, 2, 3, 4, 5])
    # Pick another token at index 2 while the reply is still being written: the running
    # one is cancelled, a second reply starts on the same message; both are live.
    model.select((("reply", tag), 2))
    assert not model.follow_latest
    chosen = model.selected_step()
    assert model.generation.pick_token(42, GREEDY)
    assert seen.of("cancel_requested") == [(tag,)]
    second = seen.of("job_submitted")[-1][0]
    assert second.output == (1, 2) and second.forced == ForcedToken(42, None)  # 42 is not a candidate there
    assert len(model.replies) == 2
    # The selection named a token by its stream: it is still the same token.
    model.select((("reply", tag), 2))
    assert model.selected_step() is chosen
    model.generation.on_finished(tag, finished(reason="cancelled", generated=5))
    (message,) = [m for m in model.thread if m.role == "assistant"]
    first_branch = message.branches[0]
    assert model.selection == (branch_key(first_branch.id), 2) and model.selected_step() is chosen
    model.generation.on_token(second.tag, step(2, 42))
    model.generation.on_finished(second.tag, finished())
    assert len(message.branches) == 2 and message.active == 1
    # Insert a turn before... after it: entries move, the selection does not.
    model.select((branch_key(first_branch.id), 2))
    model.generation.send("second", GREEDY)
    third = seen.of("job_submitted")[-1][0]
    assert model.selected_step() is not chosen  # a new reply is followed...
    model.select((branch_key(first_branch.id), 2))
    assert model.selected_step() is chosen  # ...but the old token is still addressable
    # A rejected job removes its reply; the selection stays on its token.
    model.generation.on_job_rejected(third.tag, ValueError("refused"))
    assert not model.busy() and seen.of("errored")[-1][0].args == ("refused",)
    assert model.selected_step() is chosen
    # Switching branches drops the turns of the other branch; a selection inside the
    # shown branch stays, one outside it goes to the newest token shown.
    model.step_branch(message.id, -1)
    assert message.branch is first_branch
    assert model.selected_step() is chosen
    # Deleting the conversation clears everything.
    model.delete_conversation()
    assert model.selection is None and [e.role for e in model.entries] == ["welcome"]


def test_picking_a_token_without_an_id_sends_its_text_or_nothing(store):
    """A server may send a token's text without its id: the branch job carries the text
    (``ForcedToken(None, text)``), the earlier ids as None; without any text there is
    nothing to continue from, and the running reply is left alone."""
    model = ChatModel(store)
    seen = Recorder(model.events)
    model.generation.send("hi", GREEDY)
    tag = seen.of("job_submitted")[-1][0].tag
    model.generation.on_job_started(tag, 100, 12)
    for i in range(3):
        model.generation.on_token(
            tag, replace(step(i, 5), token_id=None, top=(Candidate(None, " t5", None, (-0.5,), *[None] * 4),))
        )
    model.select((("reply", tag), 2))
    assert not model.generation.pick_token(None, GREEDY)
    assert len(seen.of("job_submitted")) == 1 and not seen.of("cancel_requested")
    assert "neither an id nor a text" in seen.of("status")[-1][0]
    assert model.generation.pick_token(None, GREEDY, forced_text=" x")
    job = seen.of("job_submitted")[-1][0]
    assert job.forced == ForcedToken(None, " x") and job.output == (None, None) and job.output_text == " t5 t5"
    assert seen.of("cancel_requested") == [(tag,)]


def test_a_reply_without_token_ids_is_not_replayed(store):
    """Replay runs the reply's ids through the local engine: a server's reply without them
    is refused with the reason rather than sent as None."""
    from app.model.model_in_use import ModelInUse
    from app.model.reply_analysis import Refusal
    from app.model.scoring import NO_IDS

    model = ChatModel(store)
    seen = Recorder(model.events)
    model.generation.send("hello", GREEDY)
    tag = seen.of("job_submitted")[-1][0].tag
    model.generation.on_job_started(tag, 100, 12)
    for i in range(2):
        model.generation.on_token(tag, replace(step(i, 5), token_id=None))
    model.generation.on_finished(tag, finished(" t5 t5", generated=2))
    in_use = ModelInUse(source="default")
    in_use.info = object()
    assert model.scoring(in_use).start_replay(GREEDY) == Refusal(NO_IDS)
    assert len(seen.of("job_submitted")) == 1


def test_compare_run_streams_in_columns_is_saved_kept_and_reopened(store):
    model = ChatModel(store)
    seen = Recorder(model.events)
    assert model.generation.send_compare("which is best?", VARIANTS)
    (job,) = seen.of("job_submitted")[-1]
    assert isinstance(job, ForkJob) and len(job.tags) == 3 and job.output == ()
    # The settings as given; a column sent with "random each reply" gets a seed of its own.
    assert [p.with_changes(seed=v.seed) for p, (_, v) in zip(job.variants, VARIANTS, strict=True)] == [
        v for _, v in VARIANTS
    ]
    assert [p.seed for p in job.variants][1:] == [1, 2] and job.variants[0].seed is not None
    (entry,) = [e for e in model.entries if e.role == "compare"]
    assert [c.label for c in entry.columns] == ["A · Greedy", "B · Hot", "C · Top-k"]
    a, b, c = job.tags
    for i in range(4):
        model.generation.on_token(a, step(i, 10 + i))
        model.generation.on_token(b, step(i, 10 + i if i < 2 else 20 + i))
        model.generation.on_token(c, step(i, 30 + i))
        js = (0.01 * i, 0.2 + i * 0.01, 0.3)
        first = (2 if i >= 2 else None, 0, 0)
        model.generation.on_divergence(job.group, Divergence(a, i, ((a, b), (a, c), (b, c)), js, first))
    assert len(seen.of("divergence_added")) == 4
    run = model.live_runs[job.group]
    x, mean = run.divergence.mean()
    assert x == [0, 1, 2, 3] and mean[1] == pytest.approx((0.01 + 0.21 + 0.3) / 3)
    assert run.divergence.first() == 0
    assert run.divergence.first_difference[(0, 1)] == 2
    assert model.selection == (("reply", a), 3)  # follows column A
    model.select_column(1, 2)
    assert model.selection == (("reply", b), 2) and model.selected_step().token_id == 22
    for tag in job.tags[:2]:
        model.generation.on_finished(tag, finished())
        assert model.busy()  # saved only when every column is done
    model.generation.on_finished(c, finished(reason="stop"))
    assert not model.busy() and run.id is not None
    message = model.thread[-1]
    assert len(message.branches) == 3 and message.branch is message.branches[0]
    (entry,) = [e for e in model.entries if e.role == "compare"]
    assert entry.finished and [c.stream for c in entry.columns] == [branch_key(br.id) for br in message.branches]
    assert model.selection == (branch_key(message.branches[1].id), 2)  # renamed with its column
    assert model.shown_run() is run

    # Keep column B: it becomes the reply, the others stay as branches.
    model.keep_column(message.id, 1)
    assert message.branch is message.branches[1] and run.kept == 1
    (reply,) = [e for e in model.entries if e.role == "assistant"]
    assert (reply.branch, reply.branches) == (1, 3) and reply.kept.startswith("kept B · Hot")
    assert model.shown_run() is None

    # Reopened after a restart: the run, its divergence and the kept column.
    store2 = Store(store.path)
    other = ChatModel(store2)
    other.open_conversation(model.conversation.id)
    (reply,) = [e for e in other.entries if e.role == "assistant"]
    assert reply.stream == branch_key(message.branches[1].id)
    saved = other.run_of(reply.stream)
    assert saved.kept == 1 and [col.label for col in saved.columns] == ["Greedy", "Hot", "Top-k"]
    assert [col.params for col in saved.columns] == list(job.variants)
    assert saved.divergence.to_dict() == run.divergence.to_dict()
    other.show_compare(reply.message_id)
    (entry,) = [e for e in other.entries if e.role == "compare"]
    assert [len(col.steps) for col in entry.columns] == [4, 4, 4]
    assert Store(store.path).reads.compare_runs(model.conversation.id)[0].kept is None
    store2.close()


def test_compare_from_here_forks_after_the_kept_tokens(store):
    model = ChatModel(store)
    seen = Recorder(model.events)
    model.generation.send("tell me", GREEDY)
    tag = seen.of("job_submitted")[-1][0].tag
    stream_reply(model, tag, [1, 2, 3, 4, 5])
    model.generation.on_finished(tag, finished())
    message = model.thread[-1]
    base = branch_key(message.branch.id)
    assert model.generation.compare_from((base, 3), VARIANTS[:2])
    job = seen.of("job_submitted")[-1][0]
    assert isinstance(job, ForkJob) and job.output == (1, 2, 3)
    (entry,) = [e for e in model.entries if e.role == "compare"]
    assert all(col.start == 3 for col in entry.columns) and entry.prefix_text == " t1 t2 t3"
    for tag in job.tags:
        model.generation.on_token(tag, step(3, 9))
        model.generation.on_finished(tag, finished())
    assert len(message.branches) == 3
    run = model.run_of(branch_key(message.branches[1].id))
    assert run.prefix_tokens == 3 and [s.token_id for s in message.branches[1].steps] == [1, 2, 3, 9]
    # Too many settings, or a reply being written, is refused with a reason.
    assert not model.generation.compare_from((base, 1), VARIANTS * 2)
    assert "2 to 4" in seen.of("status")[-1][0]


def test_a_refused_fork_removes_every_column(store):
    model = ChatModel(store)
    seen = Recorder(model.events)
    model.generation.send_compare("hi", VARIANTS)
    job = seen.of("job_submitted")[-1][0]
    error = ValueError("no")
    for tag in job.tags:
        model.generation.on_job_rejected(tag, error)
    assert not model.busy() and not model.live_runs
    assert len(seen.of("errored")) == 1


def test_divergence_series_round_trips_with_gaps():
    series = DivergenceSeries(3)
    series.add(5, ((0, 1), (0, 2), (1, 2)), (0.1, 0.2, 0.3), (None, 5, None))
    series.add(6, ((0, 1),), (0.4,), (6,))  # column 2 has finished
    assert series.js == [[0.1, 0.2, 0.3], [0.4, None, None]]
    x, y = series.mean()
    assert x == [5, 6] and y == pytest.approx([0.2, 0.4])
    assert math.isnan(series.against(0)[2][1]) and series.first() == 5
    assert DivergenceSeries.from_json(series.to_json()) == series


def test_the_import_contracts_hold():
    """The layers are import-linter contracts (``pyproject.toml``): the model layer and the
    store import no Qt, no views and no shell; the store no model layer; the views no shell;
    the app no MLX and no tools."""
    lint = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(lint).exists():
        pytest.skip("import-linter is not installed")
    root = ROOT
    out = subprocess.run([lint], cwd=root, capture_output=True, text=True, check=False, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "the model layer and the store import no Qt, no views and no shell KEPT" in out.stdout
    assert "the store imports no model layer KEPT" in out.stdout
    assert "the engine's thread touches no widget KEPT" in out.stdout


def test_scoring_replays_exports_and_imports_without_qt(store, tmp_path):
    """``app.model.scoring.Scoring``: the logic of Score text, Replay, Export and Open export,
    driven here without a window (the shell's ScoreController only forwards to it)."""
    from app.model.model_in_use import ModelInUse
    from app.model.replay import ReplayJob
    from app.model.reply_analysis import Refusal
    from app.model.scoring import NOT_SAVED

    model = ChatModel(store)
    seen = Recorder(model.events)
    model.generation.send("hello", GREEDY)
    tag = seen.of("job_submitted")[-1][0].tag
    stream_reply(model, tag, [7, 8, 9])
    model.generation.on_finished(tag, finished(" t7 t8 t9"))
    in_use = ModelInUse(source="default")
    scoring = model.scoring(in_use)
    assert scoring.start_replay(GREEDY) == Refusal(NOT_SAVED)  # no model loaded yet
    in_use.info = object()
    job = scoring.start_replay(GREEDY)
    assert isinstance(job, ReplayJob) and job.output == (7, 8, 9)
    assert scoring.start_replay(GREEDY) == Refusal("")  # one replay at a time (nothing to say)
    for s in model.steps_of(model.selection[0]):
        scoring.replay_token(job.tag, s)
    result = scoring.replay_finished(job.tag)
    assert result is not None and result.first_change is None and not result.removed
    assert scoring.branch_at_first_change() is None  # nothing changed: nowhere to branch
    assert scoring.selection_changed(None) and scoring.replay is None

    path = scoring.export("conversation", tmp_path / "chat.jsonl")
    assert path is not None and path.exists()
    assert scoring.export_data("reply") is not None and scoring.export_data("compare") is None
    conversation, source = scoring.open_export(path)
    assert source is None  # the export's model is the one in use
    other = ChatModel(store)
    assert other.open_conversation(conversation)
    assert other.conversation.title.startswith("[export] ")
    assert [s.token_id for s in other.entries[-1].steps] == [7, 8, 9]


def test_a_branch_and_compare_from_here_carry_mirostats_mu(store):
    """The engine continues a reply from its ids; μ, which they cannot rebuild, travels in
    the job, folded from the stored steps' logprobs after the stage (2τ, then each token)."""
    miro = SamplingParams(samplers=("temperature", "mirostat_v2"), mirostat_tau=3.0, mirostat_eta=0.5, max_tokens=8)
    model = ChatModel(store)
    seen = Recorder(model.events)
    model.generation.send("tell me", miro)
    tag = seen.of("job_submitted")[-1][0].tag
    assert seen.of("job_submitted")[-1][0].carry is None
    model.generation.on_job_started(tag, 100, 12)
    lps = [-1.0, -3.0, -0.2, -2.5]
    for i, lp in enumerate(lps):
        s = step(i, i + 1, miro)
        top = (replace(s.top[0], logprobs=(lp, lp, lp)),)
        chain = ("raw", "temperature", "mirostat_v2")
        model.generation.on_token(
            tag, replace(s, chain=chain, logprobs=(lp,) * 3, entropies=(1.0,) * 3, survivors=(9,) * 3, top=top)
        )
    model.generation.on_finished(tag, finished())
    mu = 6.0
    for lp in lps[:3]:
        mu -= 0.5 * (-lp / math.log(2) - 3.0)
    base = branch_key(model.thread[-1].branch.id)
    assert model.generation.compare_from((base, 3), [("a", miro), ("b", miro.with_changes(mirostat_tau=2.0))])
    fork = seen.of("job_submitted")[-1][0]
    assert isinstance(fork, ForkJob) and fork.carry == {"mirostat_v2": pytest.approx(mu)}
    for t in fork.tags:
        model.generation.on_finished(t, finished(reason="cancelled", generated=0))
    model.select((base, 3))
    assert model.generation.pick_token(7, miro)
    job = seen.of("job_submitted")[-1][0]
    assert job.output == (1, 2, 3) and job.carry == {"mirostat_v2": pytest.approx(mu)}
