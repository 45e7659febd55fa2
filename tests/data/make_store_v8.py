"""Writes ``store_v8.sqlite3``: the database of the release before refused requests were
listed (commit 263e5a6^, schema 8: ``served`` with a conversation for every request). It
must run against that commit's code:

    mkdir /tmp/v8 && git archive 263e5a6^ app engine | tar -x -C /tmp/v8
    PYTHONPATH=/tmp/v8 python tests/data/make_store_v8.py tests/data/store_v8.sqlite3

It opens ``store_v6.sqlite3`` with that store (migrating it to schema 8, recovering the
reply its journal holds) and records two served requests as that app did: a chat whose
reply was saved (finished, 3 tokens) and one still streaming when the app was killed (no
end written).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from app.store.store import SCHEMA_VERSION, Store  # the old app, from PYTHONPATH

assert SCHEMA_VERSION == 8, "run against commit 263e5a6^"
target = Path(sys.argv[1])
shutil.copy(Path(__file__).with_name("store_v6.sqlite3"), target)
store = Store(target)
store.writes.recover_interrupted()
(conversation,) = store.reads.conversations()
last = store.reads.thread(conversation.id)[-1]
CHAT = [{"role": "user", "content": "What is the capital of Spain?"}]
body = {"model": "tiny", "messages": CHAT, "max_tokens": 8, "temperature": 0.7, "seed": 4}
served = store.served.add(conversation.id, last.id, "127.0.0.1 · curl/8.5", "/v1/chat/completions", "tiny", body, CHAT)
store.served.finish(served.id, "stop", 3)
store.served.add(conversation.id, last.id, "127.0.0.1 · python-httpx", "/v1/completions", "tiny", {"prompt": "a"})
store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
store.close()
for backup in target.parent.glob(target.name + ".v*.bak"):
    backup.unlink()
print(target)
