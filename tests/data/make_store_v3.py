"""Writes ``store_v3.sqlite3``: the database of the release before the stream journal
(commit c24c79a, schema 3: compare runs). It must run against that commit's code:

    mkdir /tmp/v3 && git archive c24c79a app engine | tar -x -C /tmp/v3
    PYTHONPATH=/tmp/v3 python tests/data/make_store_v3.py tests/data/store_v3.sqlite3

It opens ``store_v1.sqlite3`` with that store (migrating it to schema 3) and adds a
compare run of two columns to its last message.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from app.model.streams import CompareColumn, DivergenceSeries  # the old app, from PYTHONPATH
from app.store import SCHEMA_VERSION, Store
from engine.api.params import SamplingParams

assert SCHEMA_VERSION == 3, "run against commit c24c79a"
target = Path(sys.argv[1])
shutil.copy(Path(__file__).with_name("store_v1.sqlite3"), target)
store = Store(target)
(conversation,) = store.conversations()
message = store.thread(conversation.id)[-1]
divergence = DivergenceSeries(2)
divergence.add(0, ((0, 1),), (0.25,), (0,))
columns = [
    (CompareColumn(label, SamplingParams(temperature=t), ("reply", 0)), message.branch.steps, "text", "stop")
    for label, t in (("cold", 0.2), ("hot", 1.5))
]
store.add_compare_run(message.id, columns, "SmolLM2-135M-Instruct", 0, divergence)
store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
store.close()
for backup in target.parent.glob(target.name + ".v*.bak"):
    backup.unlink()
print(target)
