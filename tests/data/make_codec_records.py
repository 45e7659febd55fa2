"""Writes cli_records_7900ff8.jsonl, export_records_7900ff8.jsonl and store_steps_v2.json
with the three encoders that came before the token codec (commit 7900ff8's
``engine/cli.py`` ``token_json``, ``app/export.py`` ``token_record`` and
``app/serialize.py`` ``steps_to_json``), for tests/engine/api/test_codec.py.

    mkdir -p /tmp/old && for f in engine/cli.py app/export.py app/serialize.py; do
        git show 7900ff8:$f > /tmp/old/old_$(basename $f); done
    sed -i 's/from engine.cli import token_json/from old_cli import token_json/' /tmp/old/old_export.py
    python -m tests.data.make_codec_records /tmp/old
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).parent


def main(old: str) -> None:
    sys.path.insert(0, old)
    import old_cli  # type: ignore[import-not-found]
    import old_export  # type: ignore[import-not-found]
    import old_serialize  # type: ignore[import-not-found]

    from tests.support.chain_steps import chain_step
    from tests.support.codec_steps import cli_lines, remote_step

    with open(HERE / "cli_records_7900ff8.jsonl", "w") as f:
        for kind, v in cli_lines():
            if kind == "token":
                rec = old_cli.token_json(*v)
            elif kind == "scored":
                rec = {**old_cli.token_json(*v), "rank": v[0].rank}
            elif kind == "done":
                rec = old_cli.done_json(*v)
            elif kind == "score_done":
                num = old_cli._num
                rec = {"type": "score_done", "tokens": v.tokens, "perplexity": num(v.perplexity)}
                rec |= {"mean_surprisal_bits": num(v.mean_surprisal_bits), "tokens_per_second": v.tokens_per_second}
            else:
                rec = old_cli.divergence_json(v, {4: 0, 6: 1})
            f.write(json.dumps(rec) + "\n")
    steps = [chain_step(index=2), replace(chain_step(index=3, chosen=2), forced=True, rank=4), remote_step()]
    with open(HERE / "export_records_7900ff8.jsonl", "w") as f:
        for i, s in enumerate(steps):
            rec = old_export.token_record(s, 0, {"message": 1, "branch": 0}, s.params if i != 1 else None)
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    (HERE / "store_steps_v2.json").write_text(old_serialize.steps_to_json(steps))


if __name__ == "__main__":
    main(sys.argv[1])
