"""Writes ``store_v6.sqlite3``: the database of the release before ``backend`` (commit
cc16801, schema 6: ``precision``). It must run against that commit's code:

    mkdir /tmp/v6 && git archive cc16801 app engine | tar -x -C /tmp/v6
    PYTHONPATH=/tmp/v6 python tests/data/make_store_v6.py tests/data/store_v6.sqlite3

It opens ``store_v5.sqlite3`` with that store (migrating it to schema 6, recovering the
reply its journal holds), saves a reply of the local model (float32) and a reply of
``mlx_lm.server`` (its steps say which stage the server reported, ``reported_stage``; no
precision: a server does not say), and leaves another local reply in the stream journal, as
an app killed mid-reply does.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import replace
from pathlib import Path

from app.store.store import SCHEMA_VERSION, Store  # the old app, from PYTHONPATH
from app.store.stream import StreamJournal
from engine.api.events import Candidate

assert SCHEMA_VERSION == 6, "run against commit cc16801"
LOCAL, SERVER = "SmolLM2-135M-Instruct", "http://127.0.0.1:8080"
target = Path(sys.argv[1])
shutil.copy(Path(__file__).with_name("store_v5.sqlite3"), target)
store = Store(target)
store.recover_interrupted()
(conversation,) = store.conversations()
last = store.thread(conversation.id)[-1]
steps, params = last.branch.steps, last.branch.params
store.note_model(LOCAL, "default", "float32")
store.add_branch(last.id, steps, last.branch.text, "stop", LOCAL, params)


def served(step):
    """What mlx_lm.server reports of ``step``: one stage, its logprobs, nothing else."""
    top = tuple(Candidate(c.token_id, c.text, None, (c.logprobs[0],), None, None, None, None) for c in step.top)
    return replace(
        step,
        position=None,
        chain=("penalties",),
        logprobs=(step.logprobs[0],),
        entropies=(None,),
        survivors=(None,),
        top=top,
        reported_stage="penalties",
    )


store.note_model(SERVER, SERVER, "")
store.add_branch(last.id, [served(s) for s in steps], last.branch.text, "stop", SERVER, params)
user = store.add_user_message(conversation.id, "And of Portugal?", store.thread(conversation.id)[-1].branch.id)
reply = store.add_assistant_message(conversation.id, user.id)
store.note_model(LOCAL, "default", "float32")
journal = StreamJournal(target, sources=store.model_sources, precisions=store.model_precisions)
journal.token(1, reply.id, LOCAL, params, steps[:2])
assert journal.flush()
journal._thread.join(0)  # noqa: SLF001 - killed: no close(), the rows stay
store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
store.close()
for backup in target.parent.glob(target.name + ".v*.bak"):
    backup.unlink()
print(target)
