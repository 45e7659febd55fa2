"""``generate --draft-model``: the same tokens, each record with its ``draft``, the figures in ``done``."""

import pytest

from tests.engine.cli.test_cli import by_request, cli, lines
from tests.support.tiny_model import write_tiny_model

DRAFT_KEYS = {
    "outcome",
    "position",
    "block",
    "token_id",
    "drawn_token_id",
    "coupling",
    "logprob",
    "target_logprob",
    "classic_accept_probability",
    "top",
}


@pytest.fixture(scope="module")
def near_folder(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("near") / "m", seed=0, dtype="bfloat16")


def test_a_draft_model_changes_no_token_and_reports_every_block(tiny_folder, near_folder):
    args = ["--model", str(tiny_folder), "--prompt", "the cat", "--max-tokens", "24", "--temperature", "0.8"]
    args += ["--seed", "4", "--top-logprobs", "3"]
    plain = by_request(lines(cli(*args)), 0)
    proc = cli(*args, "--draft-model", str(near_folder), "--num-draft-tokens", "4")
    objects = lines(proc)
    drafted = by_request(objects, 0)
    assert [t["token_id"] for t in drafted] == [t["token_id"] for t in plain]
    assert "draft" not in plain[0] and "draft" not in drafted[0]
    records = [t["draft"] for t in drafted[1:] if "draft" in t]
    assert records and all(set(r) == DRAFT_KEYS for r in records)
    for token, record in zip(drafted[1:], records, strict=False):
        assert record["drawn_token_id"] == token["token_id"] and record["coupling"] == "shared_noise"
        if record["outcome"] == "accepted":
            assert record["token_id"] == token["token_id"] and record["classic_accept_probability"] is not None
        elif record["outcome"] == "rejected":
            assert record["token_id"] != token["token_id"]
        else:
            assert record["outcome"] == "bonus" and record["token_id"] is None and record["top"] == []
    (done,) = [o for o in objects if o["type"] == "done"]
    figures = done["draft"]
    accepted = sum(r["outcome"] == "accepted" for r in records)
    assert figures["accepted"] == accepted
    assert figures["proposed"] == accepted + sum(r["outcome"] == "rejected" for r in records)
    assert figures["target_passes"] == sum(r["position"] == 0 for r in records)
    assert figures["tokens_per_pass"] == pytest.approx(len(records) / figures["target_passes"], abs=1e-4)
    assert figures["acceptance_rate"] == pytest.approx(accepted / figures["proposed"], abs=1e-4)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--num-draft-tokens", "0"], "number of draft tokens must be an integer in [1, 16]"),
        (["--draft-precision", "float16"], "--draft-precision is the draft model's: it needs --draft-model"),
        (["--server", "http://127.0.0.1:9"], "--draft-model is for a local model"),
    ],
)
def test_bad_draft_flags_are_one_line_errors(tiny_folder, extra, needle):
    args = ["--model", str(tiny_folder), "--prompt", "x"]
    if extra[0] != "--draft-precision":
        args += ["--draft-model", str(tiny_folder)]
    proc = cli(*args, *extra, check=False)
    assert proc.returncode != 0 and proc.stdout == ""
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_draft_with_another_vocabulary_is_refused_naming_why(tiny_folder, tmp_path):
    from tests.support.tiny_reasoning import write_qwen3_style

    other = write_qwen3_style(tmp_path / "other")
    proc = cli("--model", str(tiny_folder), "--prompt", "x", "--draft-model", str(other), check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "does not share" in proc.stderr and "vocabulary" in proc.stderr


@pytest.fixture(scope="module")
def far_folder(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("far") / "m", seed=1)


@pytest.mark.parametrize(("which", "seen"), [("near_folder", "accepted"), ("far_folder", "rejected")])
def test_the_greedy_draft_records_replay_every_decision_from_the_records_alone(tiny_folder, which, seen, request):
    """What a bug report's exported reply must let a reader redo: from each token record and
    its ``draft`` record alone, the draft's proposal is its most likely candidate, the model's
    draw its own most likely one, and the proposal was kept exactly where the two agree; the
    blocks run from position 0 to their first rejection or their bonus."""
    args = ["--model", str(tiny_folder), "--prompt", "the cat", "--max-tokens", "30", "--top-logprobs", "3"]
    draft = request.getfixturevalue(which)
    drafted = by_request(lines(cli(*args, "--draft-model", str(draft), "--num-draft-tokens", "3")), 0)
    outcomes, previous = [], None
    for token in drafted:
        record = token.get("draft")
        if record is None:  # a step without a block
            previous = None
            continue
        assert record["coupling"] == "greedy" and record["drawn_token_id"] == token["token_id"]
        assert token["token_id"] == max(token["top"], key=lambda c: c["raw_logprob"])["token_id"]
        if previous is None or previous["outcome"] != "accepted":
            assert record["position"] == 0
        else:
            assert (record["position"], record["block"]) == (previous["position"] + 1, previous["block"])
        if record["outcome"] == "bonus":
            assert record["position"] == record["block"] and record["token_id"] is None
        else:
            proposal = max(record["top"], key=lambda c: c["logprob"])["token_id"]
            assert record["token_id"] == proposal
            assert (record["outcome"] == "accepted") == (proposal == token["token_id"])
        outcomes.append(record["outcome"])
        previous = record
    assert seen in outcomes
