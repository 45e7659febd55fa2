"""Score text, replay, export and import for one conversation model, without Qt.

:class:`Scoring` holds what the window's File and Chat actions for them need between two
events: the scored texts started here, the last ``ScoreDone``, the replay being run and its
comparison with the original (:mod:`app.model.replay`). The shell's ``ScoreController``
(``app/shell/controllers/score_dialog.py``) forwards the worker's events to it and shows what it returns;
the dialogs and the timeline overlays are views (``app/views/score_views.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from app.model.conversation_thread import ConversationThread
from app.model.events import EventEmitter
from app.model.generation import Generation
from app.model.replay import Replay, ReplayJob, ReplayRun, compare
from app.model.reply_analysis import Refusal
from app.model.reply_checks import ReplyReading, branch_of, prompt_less_text
from app.model.scored import is_scored, score_prompt
from app.model.served import RAW_PROMPT
from app.model.streams import Reply
from app.store.compare_runs import StreamKey, TokenRef, branch_key
from engine.api.events import FinishReason, ScoreDone, TokenStep
from engine.api.params import SamplingParams

if TYPE_CHECKING:
    from app.model.model_in_use import ModelInUse
    from app.store.export import ExportData

NOT_SAVED = "Select a token of a saved reply to replay it."
NO_REPLAY = "Replay a reply first (Chat → Replay under the current settings)."
NO_IDS = "The selected reply came from a server that did not report its token ids: it cannot be replayed."
EXPORTS = ("reply", "conversation", "compare", "scored")
EXPORT_NEEDS = {
    "reply": "Select a token of a saved reply first.",
    "conversation": "Open or start a conversation first.",
    "compare": "Select a token of a saved compare run first.",
    "scored": "Select a token of a scored text first (File → Score text…).",
}
"""Why File → Export ``what`` is not offered now (its tooltip while disabled)."""


def score_words(done: ScoreDone) -> str:
    """The status bar's words for a scored text."""
    return (
        f"perplexity {done.perplexity:.2f} · {done.mean_surprisal_bits:.2f} bits/token · "
        f"{done.tokens} tokens at {done.tokens_per_second:.1f} tok/s"
    )


def saved_score_words(steps: list[TokenStep]) -> str:
    """The status bar's words for a saved scored text whose ``ScoreDone`` this session never
    saw (opened from an export, or scored in an earlier session): its perplexity and mean
    surprisal from its tokens' raw logprobs, as scoring computes them
    (``engine.analysis.score``), and no speed, which was not measured here."""
    nll = [-s.raw_logprob for s in steps if s.raw_logprob is not None]
    if not nll:
        return ""
    mean = sum(nll) / len(nll)
    return f"perplexity {math.exp(mean):.2f} · {mean / math.log(2):.2f} bits/token · {len(nll)} tokens"


def replay_words(result: Replay) -> str:
    """What a replay found, said when it finishes (the status bar, the timeline's legend):
    at how many of the reply's tokens the new settings' most likely token is the original
    settings', at how many it is not, how many of the reply's tokens they would remove that
    its own settings kept, and how many both remove."""
    total, differs, removed = len(result.steps), len(result.differs), len(result.removed)
    first = result.first_change
    where = "no change" if first is None else f"first change at token {first}"
    too = len(result.removed_too)
    # Tokens removed under both settings (a scored text's, given) change nothing, but the
    # curve is at 0 there: said, so that "removed 0" never stands beside a curve at 0.
    both = f", and {too} removed under the reply's own settings too" if too else ""
    return (
        f"Replay finished: same most likely token at {total - differs} of {total} tokens, "
        f"differs at {differs}, removed {removed}{both} ({where})."
    )


def replay_job(
    reading: ReplyReading, stream: StreamKey | None, params: SamplingParams, tag: int, text: str | None = None
) -> ReplayJob | None:
    """The job that replays the saved reply ``stream`` under ``params`` (``text``: the whole
    text of a reply that is a text scored without a prompt, ``prompt_less_text``)."""
    message = reading.message_of(stream) if stream is not None else None
    steps = reading.steps_of(stream)
    if message is None or message.role != "assistant" or not steps:
        return None
    ids = tuple(s.token_id for s in steps)
    if any(t is None for t in ids):
        return None  # a server's reply without token ids: nothing to replay
    return ReplayJob(tag, reading.context_for(message), tuple(t for t in ids if t is not None), params, text)


class Scoring:
    """Given what it reads and changes of the chat: ``reading`` (the selection, the streams),
    ``opened`` (the conversation and its thread, its store), ``generation`` (to score, to
    continue from a token), ``select`` and ``new_chat`` (the chat's commands), and
    ``renamed`` (the chat's ``stream_renamed`` event, to follow a scored text once saved)."""

    def __init__(
        self,
        reading: ReplyReading,
        opened: ConversationThread,
        generation: Generation,
        select: Callable[[TokenRef | None], None],
        new_chat: Callable[[], None],
        renamed: EventEmitter,
        in_use: ModelInUse,
    ) -> None:
        self.reading, self.opened, self.generation, self.in_use = reading, opened, generation, in_use
        self.select, self.new_chat = select, new_chat
        self.last_done: ScoreDone | None = None
        self.done_of: dict[StreamKey, ScoreDone] = {}
        """Each scored text's own ``ScoreDone`` (by its stream, renamed once it is saved)."""
        self.replay: ReplayRun | None = None
        self.result: Replay | None = None
        self.score_tags: set[int] = set()
        renamed.connect(self._on_renamed)

    def _on_renamed(self, old: StreamKey, new: StreamKey) -> None:
        if old in self.done_of:
            self.done_of[new] = self.done_of.pop(old)

    # Score text ------------------------------------------------------------------------------

    def score_text(self, text: str, params: SamplingParams, prompt: str | None = None) -> Reply | None:
        """Start scoring ``text`` in a new conversation (the reply being scored, or None)."""
        self.clear_replay()
        reply = self.generation.score(text, params, prompt or None, self.new_chat)
        if reply is not None:
            self.score_tags.add(reply.id)
        return reply

    def scored_steps(self) -> list[TokenStep] | None:
        """The steps of the selected stream when it is a scored text (being scored or saved)."""
        stream = self.reading.selection[0] if self.reading.selection is not None else None
        if stream is None:
            return None
        if stream[0] == "reply":
            return self.reading.steps_of(stream) if stream[1] in self.score_tags else None
        found = branch_of(self.reading, stream)
        if found is None or not found.steps or not all(s.forced for s in found.steps):
            return None
        return found.steps if found.finish_reason == FinishReason.SCORED or is_scored(found.steps[0]) else None

    def conversation_figures(self) -> str:
        """The figures of the scored text the open conversation ends with ("" when it ends
        with anything else, or a scored text cancelled or interrupted): its own
        ``ScoreDone``'s words when it was scored in this session, else those its saved tokens
        give (:func:`saved_score_words`)."""
        message = self.opened.last_assistant()
        branch = message.branch if message is not None else None
        if branch is None or branch.finish_reason != FinishReason.SCORED or not branch.steps:
            return ""
        done = self.done_of.get(branch_key(branch.id))
        return score_words(done) if done is not None else saved_score_words(branch.steps)

    def score_finished(self, tag: int, done: ScoreDone) -> bool:
        """The worker's ``ScoreDone``: True for a scored text's (kept as ``last_done``),
        False for the replay's (kept with the replay)."""
        if self.replay is not None and tag == self.replay.tag:
            self.replay.done = done
            return False
        self.last_done = done
        self.done_of[("reply", tag)] = done
        return True

    # Replay --------------------------------------------------------------------------------

    def start_replay(self, params: SamplingParams) -> ReplayJob | Refusal:
        """The job replaying the selected saved reply under ``params``, or why there is none
        (the analyses' typed refusal, ``app.model.reply_analysis``: its words for the status
        bar, empty while a replay is still running)."""
        stream = self.reading.selection[0] if self.reading.selection is not None else None
        if self.in_use.info is None or stream is None or stream[0] != "branch":
            return Refusal(NOT_SAVED)
        if self.replay is not None and self.replay.done is None:
            return Refusal("")
        if any(s.token_id is None for s in self.reading.steps_of(stream)):
            return Refusal(NO_IDS)
        if self.reading.raw_prompt():
            return Refusal(RAW_PROMPT)
        message, branch = self.reading.message_of(stream), branch_of(self.reading, stream)
        text = prompt_less_text(self.reading, message, branch) if branch is not None else None
        job = replay_job(self.reading, stream, params, self.generation.new_id(), text)
        if job is None:
            return Refusal(NOT_SAVED)
        self.clear_replay()
        self.replay = ReplayRun(job.tag, stream, params)
        return job

    def replay_token(self, tag: int, step: TokenStep) -> None:
        if self.replay is not None and tag == self.replay.tag:
            self.replay.steps.append(step)

    def replay_finished(self, tag: int) -> Replay | None:
        """The replay compared with the original once its job ended (None: not the replay's job)."""
        if self.replay is None or tag != self.replay.tag:
            return None
        original = self.reading.steps_of(self.replay.stream) or []
        self.result = compare(original, self.replay.steps, self.replay.params)
        return self.result

    def clear_replay(self) -> None:
        self.replay, self.result = None, None

    def selection_changed(self, ref: TokenRef | None) -> bool:
        """Selecting another reply ends the replay shown; True when it did."""
        if self.replay is not None and (ref is None or ref[0] != self.replay.stream):
            self.clear_replay()
            return True
        return False

    def branch_at_first_change(self) -> bool | None:
        """Continue the replayed reply from its first change, with the new settings' most
        likely token there (a branch); None when no replay has a change."""
        r, run = self.result, self.replay
        if r is None or run is None or r.first_change is None:
            return None
        index = r.first_change
        self.select((run.stream, index))
        ok = self.generation.pick_token(r.new_top[index], run.params)
        self.clear_replay()
        return ok

    # Exports -------------------------------------------------------------------------------

    def export_kinds(self) -> frozenset[str]:
        """The exports (of :data:`EXPORTS`) that fit the selection now: the open conversation;
        a saved reply's token: that reply, and its compare run if it is a column of one; a
        scored text's token: that scored text (not a reply)."""
        kinds = {"conversation"} if self.opened.conversation is not None else set()
        stream = self.reading.selection[0] if self.reading.selection is not None else None
        if stream is None or stream[0] != "branch":
            return frozenset(kinds)
        if self.scored_steps() is not None:
            kinds.add("scored")
        else:
            kinds.add("reply")
            run = self.reading.streams.run_of(stream)
            if run is not None and run.id is not None:
                kinds.add("compare")
        return frozenset(kinds)

    def export_data(self, what: str) -> ExportData | None:
        """What File → Export ``what`` writes (one of :data:`EXPORTS`): the selected thing,
        None when the selection is not of that kind (:meth:`export_kinds`)."""
        from app.store.export_store import compare_only, from_store, reply_only

        if what not in self.export_kinds():
            return None
        if what == "scored":
            return self._scored_data(self.reading.selection[0])
        self.opened.background.wait()  # a reply's steps reach the store once serialized
        # The journal holds only what is being written now: the start recovered the rest.
        data = from_store(self.opened.store, self.opened.conversation.id, self.in_use.source, journal=False)
        if what == "conversation":
            return data
        stream: StreamKey = self.reading.selection[0]
        for i, m in enumerate(
            self.opened.store.db.execute(
                "SELECT id FROM messages WHERE conversation_id = ? ORDER BY id", (self.opened.conversation.id,)
            ).fetchall()
        ):
            rows = self.opened.store.db.execute("SELECT id FROM branches WHERE message_id = ? ORDER BY id", (m[0],))
            ids = [b for (b,) in rows]
            if stream[1] in ids:
                j = ids.index(stream[1])
                if what == "compare":
                    for k, run in enumerate(data.runs):
                        if run.message == i and any(c["branch"] == j for c in run.columns):
                            return compare_only(data, k)
                    return None
                return reply_only(data, i, j)
        return None

    def _scored_data(self, stream: StreamKey) -> ExportData | None:
        """The selected scored text: its own text, the prompt it was scored as the reply to,
        its steps and its own ``ScoreDone`` (None: not scored in this session)."""
        from app.store.export_store import scored

        message, branch = self.reading.message_of(stream), branch_of(self.reading, stream)
        if branch is None or not branch.steps:
            return None
        index = self.opened.thread.index(message)
        user = self.opened.thread[index - 1] if index > 0 and self.opened.thread[index - 1].role == "user" else None
        source = {"name": branch.model, "source": branch.model_source or self.in_use.source}
        source["precision"], source["backend"] = branch.precision, branch.backend
        prompt = score_prompt(user.content) if user is not None else None
        done, interrupted = self.done_of.get(stream), branch.finish_reason == FinishReason.INTERRUPTED
        # A text scored without a prompt: its first token was the context, which the saved
        # reply's text leaves out; the export's "text" is the text as it was given, whole.
        text = (prompt_less_text(self.reading, message, branch) if prompt is None else None) or branch.text
        return scored(text, prompt, branch.steps[0].params, branch.steps, done, source, interrupted)

    def export(self, what: str, path: str | Path, data: ExportData | None = None) -> Path | None:
        """Write File → Export ``what`` (or ``data``, its :meth:`export_data` read before) to
        ``path`` (JSON Lines, or CSV by its suffix); None: nothing to export."""
        from app.store.export import write

        data = data if data is not None else self.export_data(what)
        if data is None:
            return None
        write(data, path)
        return Path(path)

    # Import --------------------------------------------------------------------------------

    def open_export(self, path: str | Path) -> tuple[int, str | None]:
        """Copy the JSON Lines export at ``path`` into a new conversation of the store (the file
        is never written); returns the conversation and the model source the export names when
        it differs from the one in use and can be loaded here (else None). Raises
        ``OSError``, ``ExportFormatError``, ``KeyError`` or ``ValueError`` for a file it cannot read."""
        from app.store.export import from_records, read_jsonl
        from app.store.export_store import to_store

        data = from_records(read_jsonl(path))
        conversation = to_store(data, self.opened.store, title_prefix="[export] ")
        source = (data.model or {}).get("source")
        if source and source != self.in_use.source and (source == "default" or Path(source).exists()):
            return conversation, source
        return conversation, None
