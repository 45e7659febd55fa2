"""Writes ``store_v4.sqlite3``: the database of the release before ``model_source``
(commit 0c6f567, schema 4: the stream journal). It must run against that commit's code:

    mkdir /tmp/v4 && git archive 0c6f567 app engine | tar -x -C /tmp/v4
    PYTHONPATH=/tmp/v4 python tests/data/make_store_v4.py tests/data/store_v4.sqlite3

It opens ``store_v3.sqlite3`` with that store (migrating it to schema 4) and leaves a reply
in the stream journal, as an app killed mid-reply does: two token steps of the last
branch under a new assistant message, never saved as a branch.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from app.store_stream import StreamJournal

from app.store import SCHEMA_VERSION, Store  # the old app, from PYTHONPATH

assert SCHEMA_VERSION == 4, "run against commit 0c6f567"
target = Path(sys.argv[1])
shutil.copy(Path(__file__).with_name("store_v3.sqlite3"), target)
store = Store(target)
(conversation,) = store.conversations()
last = store.thread(conversation.id)[-1]
user = store.add_user_message(conversation.id, "And of Italy?", last.branch.id)
reply = store.add_assistant_message(conversation.id, user.id)
journal = StreamJournal(target)
journal.token(1, reply.id, "SmolLM2-135M-Instruct", last.branch.params, last.branch.steps[:2])
assert journal.flush()
journal._thread.join(0)  # noqa: SLF001 - killed: no close(), the rows stay
store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
store.close()
for backup in target.parent.glob(target.name + ".v*.bak"):
    backup.unlink()
print(target)
