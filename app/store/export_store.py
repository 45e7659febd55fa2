"""Exports from the store and back into it (Qt-free): a conversation's every message and
branch (``from_store``), one reply or one compare run of it, a scored text, and an
imported export written back as a new conversation (``to_store``). The records and their
formats are :mod:`app.store.export`'s.
"""

from __future__ import annotations

import json
import time

from app.store.export import ExportBranch, ExportData, ExportMessage, ExportRun, ExportScore
from app.store.journal_read import JournalReply, journal_replies
from app.store.scored_labels import IMPORTED_LABEL, score_label
from engine.api.codec import score_done_fields
from engine.api.events import FinishReason, ScoreDone, TokenStep
from engine.api.params import SamplingParams

# Store -> ExportData -------------------------------------------------------------------------------------


def from_store(store, conversation_id: int, model_source: str | None = None, journal: bool = True) -> ExportData:
    """Every message and every branch of a conversation (not only the active ones).
    ``journal``: with the replies the stream journal holds, read as the next start would
    recover them (:mod:`app.store.journal_read`): one never saved is an ``interrupted``
    branch (made its message's shown one), one saved without its steps gets them. The app
    passes False: it recovered its journal when it started, and what is left there is being
    written now."""
    from app.store.serialize import steps_from_json

    db = store.db
    conv = store.reads.conversation(conversation_id)
    if conv is None:
        raise KeyError(f"no conversation {conversation_id}")
    left = journal_replies(db, conversation_id) if journal else []
    fills = {r.fills: r.steps_json for r in left if r.fills is not None and r.steps}
    rows = db.execute(
        "SELECT id, role, content, after_message, after_branch, active_branch FROM messages "
        "WHERE conversation_id = ? ORDER BY id",
        (conversation_id,),
    ).fetchall()
    data = ExportData("conversation", {}, conv.title, conv.system_prompt)
    message_at: dict[int, int] = {}
    branch_at: dict[int, tuple[int, int]] = {}
    for mid, role, content, after_message, after_branch, active in rows:
        i = len(data.messages)
        message_at[mid] = i
        m = ExportMessage(role, content or "")
        if role == "user":
            m.after = branch_at.get(after_branch) if after_branch is not None else None
        else:
            m.after = (message_at.get(after_message, -1), -1)
            brows = db.execute(
                "SELECT id, text, finish_reason, model, params, steps, model_source, precision, backend"
                " FROM branches WHERE message_id = ? ORDER BY id",
                (mid,),
            ).fetchall()
            for j, (bid, text, reason, model, params, steps, *origin) in enumerate(brows):
                branch_at[bid] = (i, j)
                if steps == "[]" and bid in fills:
                    steps = fills[bid]  # saved just before the end; its steps are in the journal
                m.branches.append(
                    ExportBranch(
                        model,
                        SamplingParams.from_dict(json.loads(params)),
                        reason,
                        text,
                        steps_from_json(steps),
                        *origin,
                    )
                )
                if bid == active:
                    m.active = j
            if active is None and m.branches:
                m.active = len(m.branches) - 1
            for reply in left:
                if reply.interrupted and reply.message_id == mid:
                    m.branches.append(interrupted_branch(reply))
                    m.active = len(m.branches) - 1  # as recovery makes it
        data.messages.append(m)
    for _rid, message_id, prefix, columns, divergence, kept in db.execute(
        "SELECT r.id, r.message_id, r.prefix_tokens, r.columns, r.divergence, r.kept FROM compare_runs r "
        "JOIN messages m ON m.id = r.message_id WHERE m.conversation_id = ? ORDER BY r.id",
        (conversation_id,),
    ).fetchall():
        cols = [
            {"label": c["label"], "params": c["params"], "branch": branch_at[c["branch"]][1]}
            for c in json.loads(columns)
        ]
        data.runs.append(ExportRun(message_at[message_id], prefix, cols, json.loads(divergence), kept))
    first = next((b for m in data.messages for b in m.branches), None)
    # The replies' own record first: the model loaded now may not be the one that wrote them.
    source = first.source if first is not None and first.source else model_source
    data.model = {
        "name": first.model if first is not None else "",
        "source": source,
        "precision": first.precision if first is not None else None,
        "backend": first.backend if first is not None else None,
    }
    return data


def interrupted_branch(reply: JournalReply) -> ExportBranch:
    """A reply left in the journal, never saved: a branch marked ``interrupted``."""
    from app.store.serialize import steps_from_json

    params = SamplingParams.from_dict(json.loads(reply.params))
    steps = steps_from_json(reply.steps_json)
    return ExportBranch(
        reply.model, params, FinishReason.INTERRUPTED, reply.text, steps, reply.source, reply.precision, reply.backend
    )


def reply_only(data: ExportData, message: int, branch: int) -> ExportData:
    """The turns leading to branch ``branch`` of message ``message`` and that branch alone."""
    path: list[int] = []
    i: int | None = message
    keep_branch: dict[int, int] = {message: branch}
    while i is not None and i >= 0:
        path.append(i)
        m = data.messages[i]
        if m.role == "assistant":
            i = m.after[0] if m.after else None
        else:
            if m.after is None:
                i = None
            else:
                keep_branch[m.after[0]] = m.after[1]
                i = m.after[0]
    path.reverse()
    new_index = {old: new for new, old in enumerate(path)}
    out = ExportData("reply", data.model, data.title, data.system_prompt)
    for old in path:
        m = data.messages[old]
        nm = ExportMessage(m.role, m.content)
        if m.role == "user":
            nm.after = (new_index[m.after[0]], 0) if m.after is not None else None
        else:
            nm.after = (new_index[m.after[0]], -1) if m.after is not None else None
            nm.branches = [m.branches[keep_branch[old]]]
        out.messages.append(nm)
    return out


def compare_only(data: ExportData, run_index: int) -> ExportData:
    """A compare run: the turns leading to its message and its columns."""
    run = data.runs[run_index]
    first = run.columns[0]["branch"]
    out = reply_only(data, run.message, first)
    out.kind = "compare"
    m = data.messages[run.message]
    target = out.messages[-1]
    target.branches = [m.branches[c["branch"]] for c in run.columns]
    target.active = 0
    cols = [{**c, "branch": k} for k, c in enumerate(run.columns)]
    out.runs = [ExportRun(len(out.messages) - 1, run.prefix_tokens, cols, run.divergence, run.kept)]
    return out


def scored(
    text: str,
    prompt: str | None,
    params: SamplingParams,
    steps: list[TokenStep],
    done: ScoreDone | None,
    model: dict,
    interrupted: bool = False,
) -> ExportData:
    done_dict = score_done_fields(done) if done is not None else None
    score = ExportScore(text, prompt, params, list(steps), done_dict, interrupted)
    return ExportData("score", model, score=score)


# ExportData -> store (import) ------------------------------------------------------------------------


def scored_turn(text: str, prompt: str | None, steps: list[TokenStep]) -> tuple[str, str]:
    """The user turn and the reply's text of an imported scored text, as scoring saved them:
    with a prompt, the prompt and the text; without one, the text's label (``score_label``:
    what rebuilds the whole text, its context token included, for Compare models and the
    logit lens) and the scored tokens' text. The copy read "(scored text)" as a prompt and
    reached another perplexity. An export whose text lacks the context (written before it
    kept it) is kept as it is."""
    if prompt is not None:
        return prompt, text
    scored_text = "".join(step.text for step in steps)
    if text.strip() and scored_text and text.endswith(scored_text) and len(text) > len(scored_text):
        return score_label(text), scored_text
    return (score_label(text) if text.strip() else IMPORTED_LABEL), text


def to_store(data: ExportData, store, title_prefix: str = "") -> int:
    """Write an imported conversation (or reply, or compare run) into ``store`` as a new
    conversation; returns its id. A scored text becomes one user turn and its scored reply."""
    from app.store.serialize import steps_to_json

    title = data.title
    if data.score is not None:
        user_turn, text = scored_turn(data.score.text, data.score.prompt, data.score.steps)
        # An export of a scored text has no title of its own: the one scoring gave it (the
        # user turn's first line, as any conversation's), not "Imported".
        title = title or (user_turn.strip().splitlines() or [""])[0][:60]
    conv = store.writes.new_conversation(data.system_prompt, title_prefix + (title or "Imported"))
    if data.score is not None:
        s = data.score
        user = store.writes.add_user_message(conv.id, user_turn, None)
        reply = store.writes.add_assistant_message(conv.id, user.id)
        name, source = data.model.get("name", ""), data.model.get("source")
        store.writes.add_branch(
            reply.id,
            s.steps,
            text,
            FinishReason.INTERRUPTED if s.interrupted else FinishReason.SCORED,
            name,
            s.params,
            model_source=source,
            precision=data.model.get("precision") or "",
            backend=data.model.get("backend") or "",
        )
        return conv.id
    ids: list[int] = []
    branch_ids: list[list[int]] = []
    for m in data.messages:
        if m.role == "user":
            after = branch_ids[m.after[0]][m.after[1]] if m.after is not None else None
            msg = store.writes.add_user_message(conv.id, m.content, after)
            branch_ids.append([])
        else:
            msg = store.writes.add_assistant_message(conv.id, ids[m.after[0]])
            made = []
            for b in m.branches:
                made.append(
                    store.writes.add_branch(
                        msg.id,
                        b.steps,
                        b.text,
                        b.finish_reason,
                        b.model,
                        b.params,
                        steps_to_json(b.steps),
                        b.source,
                        b.precision or "",
                        b.backend or "",
                    ).id
                )
            if made:
                store.writes.set_active_branch(msg.id, made[m.active])
            branch_ids.append(made)
        ids.append(msg.id)
    for run in data.runs:
        cols = [{**c, "branch": branch_ids[run.message][c["branch"]]} for c in run.columns]
        store.db.execute(
            "INSERT INTO compare_runs(message_id, prefix_tokens, columns, divergence, kept, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (ids[run.message], run.prefix_tokens, json.dumps(cols), json.dumps(run.divergence), run.kept, time.time()),
        )
    store.db.commit()
    return conv.id
