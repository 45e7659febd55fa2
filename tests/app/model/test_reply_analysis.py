"""The analysis of a reply in the model layer (``app.model.reply_analysis``), Qt-free: the
typed refusal, the target, one staleness rule, late events of a cancelled job dropped — the
same for each analysis built on it (the logit lens, Compare models, Check precision)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from app.model.chat import ChatModel
from app.model.logit_lens import LogitLens
from app.model.model_compare import CompareSettings, ModelComparisons
from app.model.model_in_use import ModelInUse
from app.model.precision_check import PrecisionChecks
from app.model.reply_analysis import NO_MODEL, Refusal, ReplyTarget
from app.store.store import Store
from engine.api.capabilities import LOCAL_CAPABILITIES
from tests.app.model.test_model import GREEDY, finished, stream_reply

ANALYSES = (LogitLens, ModelComparisons, PrecisionChecks)


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "db.sqlite3")
    yield store
    store.close()


def saved_reply(store: Store, tokens: list[int]) -> tuple[ChatModel, ModelInUse]:
    """A chat with one saved reply of ``tokens``, selected, written by the model in use."""
    chat = ChatModel(store)
    assert chat.generation.send("hello", GREEDY)
    tag = chat.entries[-1].stream[1]
    stream_reply(chat, tag, tokens)
    chat.generation.on_finished(tag, finished(" ".join(f"t{t}" for t in tokens)))
    name = chat.thread[-1].branch.model
    # float16: in float32 (its KV cache unquantized) Check precision has nothing to find.
    info = SimpleNamespace(name=name, capabilities=LOCAL_CAPABILITIES, precision="float16", kv=None)
    return chat, ModelInUse(source="default", info=info)


def start(analysis):
    if isinstance(analysis, ModelComparisons):
        return analysis.start(CompareSettings("default"))
    if isinstance(analysis, LogitLens):
        return analysis.start(None)
    return analysis.start()


@pytest.mark.parametrize("kind", ANALYSES)
def test_each_analysis_refuses_with_a_typed_refusal_in_its_own_words(store, kind):
    chat, in_use = saved_reply(store, [7, 8, 9])
    analysis = kind(chat.reading, ModelInUse())
    refused = start(analysis)
    assert isinstance(refused, Refusal) and str(refused) == refused.why == analysis.no_model
    assert analysis.running is None and analysis.unavailable() == analysis.no_model
    server = replace(LOCAL_CAPABILITIES, reasons=((kind.capability, "a server does not say."),))
    server = replace(server, **{kind.capability: False})
    server = SimpleNamespace(name=in_use.info.name, capabilities=server)
    analysis = kind(chat.reading, ModelInUse(info=server))
    assert analysis.refusal() == Refusal("a server does not say.")
    chat.select(None)
    analysis = kind(chat.reading, in_use)
    assert analysis.refusal() == Refusal(kind.select_hint)
    assert NO_MODEL == "No model is loaded."


@pytest.mark.parametrize("kind", ANALYSES)
def test_the_target_is_the_selected_reply_and_a_job_runs_one_at_a_time(store, kind):
    chat, in_use = saved_reply(store, [7, 8, 9])
    analysis = kind(chat.reading, in_use)
    target = analysis.target()
    assert isinstance(target, ReplyTarget)
    assert target.stream == chat.selection[0] and target.output == (7, 8, 9)
    assert target.text is None and target.messages[-1] == {"role": "user", "content": "hello"}
    assert target.pieces == (" t7", " t8", " t9")
    job = start(analysis)
    assert job.tag == 1 and analysis.running is job and analysis.stream == target.stream
    if kind.running_words:  # Compare models and Check precision refuse a second job meanwhile
        assert analysis.refusal() == Refusal(kind.running_words)
    cancelled = []
    analysis.events.cancelled.connect(cancelled.append)
    assert analysis.cancel() is job and cancelled == [job] and analysis.running is None
    assert not analysis.mine(job.tag)  # its late events are dropped
    analysis.on_failed(job.tag, "late")
    assert analysis.cancel() is None


def test_one_staleness_rule_a_result_shows_while_its_reply_holds_its_tokens(store):
    chat, in_use = saved_reply(store, [7, 8, 9])
    checks = PrecisionChecks(chat.reading, in_use)
    job = checks.start()
    rows = [SimpleNamespace(index=i) for i in range(3)]
    found = checks.on_finished(job.tag, rows, summary="summary")
    assert found is not None and checks.running is None
    stream, _ = chat.selection
    assert checks.of(stream) is found and checks.selected() == (found, rows[2])
    assert found.at(3) is None and found.pieces == (" t7", " t8", " t9")
    # The stream's tokens changed (a deleted conversation's branch id given to a new reply).
    checks.results[stream] = replace(found, output=(7, 8, 10))
    assert checks.of(stream) is None and checks.selected() == (None, None)
    checks.results[stream] = found
    checks.clear()  # another model is in use
    assert checks.of(stream) is None and not checks.results
    # Compare models keeps the compared token ids the same way.
    comparisons = ModelComparisons(chat.reading, in_use)
    job = start(comparisons)
    comparisons.on_loaded(job.tag, SimpleNamespace(name="second", precision="float16", source="x", kv=""))
    kld = [  # engine.api.results.TokenKLD's fields (that module loads MLX)
        SimpleNamespace(
            index=i, token_id=t, kld=0.0, same_top=True, logprob_base=-1.0, logprob_model=-1.0,
            top_base=((t, -1.0),), top_model=((t, -1.0),),
        )
        for i, t in enumerate((7, 8, 9))
    ]  # fmt: skip
    comparison = comparisons.on_finished(job.tag, kld, {})
    assert comparison.output == (7, 8, 9) and comparisons.selected() == (comparison, kld[2])
