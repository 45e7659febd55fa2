"""Writes ``store_v5.sqlite3``: the database of the release before ``precision`` (commit
3ffeeaf, schema 5: ``model_source``). It must run against that commit's code:

    mkdir /tmp/v5 && git archive 3ffeeaf app engine | tar -x -C /tmp/v5
    PYTHONPATH=/tmp/v5 python tests/data/make_store_v5.py tests/data/store_v5.sqlite3

It opens ``store_v4.sqlite3`` with that store (migrating it to schema 5, recovering the
reply its journal holds), saves one reply with its model's source, and leaves another reply
in the stream journal, as an app killed mid-reply does.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from app.store_stream import StreamJournal

from app.store import SCHEMA_VERSION, Store  # the old app, from PYTHONPATH

assert SCHEMA_VERSION == 5, "run against commit 3ffeeaf"
target = Path(sys.argv[1])
shutil.copy(Path(__file__).with_name("store_v4.sqlite3"), target)
store = Store(target)
store.recover_interrupted()
store.note_model("SmolLM2-135M-Instruct", "default")
(conversation,) = store.conversations()
last = store.thread(conversation.id)[-1]
store.add_branch(last.id, last.branch.steps, last.branch.text, "stop", "SmolLM2-135M-Instruct", last.branch.params)
user = store.add_user_message(conversation.id, "And of Spain?", store.thread(conversation.id)[-1].branch.id)
reply = store.add_assistant_message(conversation.id, user.id)
journal = StreamJournal(target, sources=store.model_sources)
journal.token(1, reply.id, "SmolLM2-135M-Instruct", last.branch.params, last.branch.steps[:2])
assert journal.flush()
journal._thread.join(0)  # noqa: SLF001 - killed: no close(), the rows stay
store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
store.close()
for backup in target.parent.glob(target.name + ".v*.bak"):
    backup.unlink()
print(target)
