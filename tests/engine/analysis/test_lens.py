"""The logit lens (engine/analysis/lens.py) against transformers' float32 run of the same GGUF file
with forward hooks on its decoder layers (final norm + lm_head, + final-logit softcapping
where the config has it, on each layer's output) — the default model (llama) and Gemma 3
270M, kept by ``python -m tests.data.make_transformers_references`` (``reference_lens`` is
how) — and its own invariants on tiny models."""

from __future__ import annotations

import json
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest

from engine.analysis.lens import lens
from engine.api.errors import EngineError
from engine.runtime.prompts import encode_text
from tests.support import real_models
from tests.support.references import TopRows
from tests.support.references import reference as reference_of

TEXT = "The capital of France is Paris. It is known for the Eiffel Tower."
GEMMA_TEXT = "The quick brown fox jumps over the lazy dog, and the cat sleeps in the sun."


def reference_lens(model, ids: list[int]) -> list[np.ndarray]:
    """Per layer (0 = the embeddings' output, then each decoder layer's), the log-softmax of
    lm_head(norm(h)) at every position (softcapped as the model caps its logits):
    transformers' own modules, hooked. Gemma's ``embed_tokens`` is its scaled embedding
    (``Gemma3TextScaledWordEmbedding``: the lookup times ``embed_scale`` = √hidden), so its
    output is the input of the first block, as the lens's layer 0 is."""
    import torch

    states = []
    hooks = [model.model.embed_tokens.register_forward_hook(lambda m, i, o: states.append(o))]
    for layer in model.model.layers:
        hooks.append(layer.register_forward_hook(lambda m, i, o: states.append(o[0] if isinstance(o, tuple) else o)))
    cap = getattr(model.config, "final_logit_softcapping", None)
    try:
        with torch.no_grad():
            model(torch.tensor([ids]))
            out = []
            for h in states:
                logits = model.lm_head(model.model.norm(h))[0].float()
                if cap:
                    logits = torch.tanh(logits / cap) * cap
                out.append(torch.log_softmax(logits, -1).numpy())
    finally:
        for h in hooks:
            h.remove()
    return out


def per_layer_differences(rows, reference: list[TopRows]) -> list[float]:
    """Per layer, the largest difference over ``rows``' positions between the reference's
    top-5 logprobs and the engine's at the same token ids (each must be in its top 100)."""
    worst = [0.0] * len(reference)
    for row in rows:
        assert len(row.layers) == len(reference)
        for layer in row.layers:
            engine = dict(layer.top)
            for token, value in reference[layer.layer].top(row.position, 5):
                assert token in engine, (row.position, layer.layer, token)
                worst[layer.layer] = max(worst[layer.layer], abs(engine[token] - value))
    return worst


@pytest.mark.slow
def test_default_model_layer_by_layer_against_transformers(smollm):
    """The lens on the default model against transformers' hooked float32 run, every layer
    (kept: tests/support/references.py)."""
    ids = encode_text(smollm.tokenizer, TEXT)
    reference = reference_of("smollm2", real_models.smollm_gguf()).lens("lens", ids)
    positions = [3, 9, len(ids) - 1]
    worst = 0.0
    for p in lens(smollm, ids, positions, top=5):
        assert len(p.layers) == len(reference)
        for layer in p.layers:
            ref = reference[layer.layer]
            top = [i for i, _ in layer.top]
            first = ref.value(p.position, top[0])
            assert first is not None and (top[0] == ref.argmax(p.position) or ref.max(p.position) - first < 0.03)
            for i, lp in layer.top:
                value = ref.value(p.position, i)
                assert value is not None, (p.position, layer.layer, i)
                worst = max(worst, abs(lp - value))
    print(f"largest top-5 difference over layers: {worst:.4f}")
    assert worst < 0.03


def test_the_last_layer_is_the_models_logits_and_positions_agree(tiny):
    ids = tiny.tokenizer.encode("the cat sat on the mat and the dog ran")
    logits = np.array(tiny.model(mx.array(ids)[None])[0], np.float64)
    alone = {p.position: p for p in lens(tiny, ids, [len(ids) - 1])}
    together = {p.position: p for p in lens(tiny, ids, [2, 5, len(ids) - 1])}
    last = together[len(ids) - 1]
    final = logits[-1] - np.logaddexp.reduce(logits[-1])
    assert [i for i, _ in last.layers[-1].top] == list(np.argsort(-final)[:10])
    np.testing.assert_allclose([lp for _, lp in last.layers[-1].top], np.sort(final)[::-1][:10], atol=1e-4)
    assert last.layers[-1].kl_final == 0.0 and last.layers[-1].rank_final_top1 == 1
    for a, b in zip(alone[len(ids) - 1].layers, last.layers, strict=True):  # one pass or several: the same
        assert a.top[0][0] == b.top[0][0] and a.kl_final == pytest.approx(b.kl_final, abs=1e-4)
    assert len(last.layers) == tiny.config["num_hidden_layers"] + 1
    early = together[2]
    assert early.chosen == ids[3] and early.chosen_is_next and not last.chosen_is_next
    tops = [layer.top[0][0] for layer in early.layers]
    if early.decided_at is not None:
        assert all(t == early.chosen for t in tops[early.decided_at :])
        assert early.decided_at == 0 or tops[early.decided_at - 1] != early.chosen
    with pytest.raises(EngineError):
        list(lens(tiny, ids, [len(ids)]))


def test_cli_prints_one_record_per_layer(tiny_folder):
    args = [
        sys.executable,
        "-m",
        "engine",
        "lens",
        "--model",
        str(tiny_folder),
        "--prompt",
        "the cat sat",
        "--top",
        "3",
    ]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    layers = [r for r in records if r["type"] == "layer"]
    (position,) = [r for r in records if r["type"] == "position"]
    assert [r["layer"] for r in layers] == list(range(len(layers)))
    assert all(len(r["top"]) == 3 and {"token_id", "text", "logprob"} <= set(r["top"][0]) for r in layers)
    assert layers[-1]["kl_final"] == 0.0 and layers[-1]["rank_final_top1"] == 1
    assert position["chosen_is_next"] is False and position["chosen"] == layers[-1]["top"][0]["token_id"]
    bad = subprocess.run([*args, "--position", "99"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and bad.stderr.startswith("error: ")


def test_the_session_reads_a_reply_counted_from_its_first_token(tiny_folder):
    """A reply the engine generated: at each of its tokens the lens's last layer is the
    distribution the step reports under ``raw``, and its chosen token the one drawn."""
    from engine.api.events import TokenStep
    from engine.api.params import SamplingParams
    from engine.session.session import EngineSession

    session = EngineSession()
    session.load(str(tiny_folder))
    assert session.capabilities.logit_lens and not session.capabilities.reason("logit_lens")
    messages = [{"role": "user", "content": "the cat sat"}]
    session.start(messages, SamplingParams(max_tokens=6, top_logprobs=5))
    steps = []
    while session.has_work():
        steps += [e for e in session.step() if isinstance(e, TokenStep)]
    output = [s.token_id for s in steps]
    rows = list(session.lens_reply(messages, output, top=5))
    assert [r.position for r in rows] == list(range(len(output)))
    for step, row in zip(steps, rows, strict=True):
        assert row.chosen == step.token_id and row.chosen_is_next
        assert all(layer.position == step.index for layer in row.layers)
        raw = sorted(step.top, key=lambda c: -c.logprobs[0])[:5]
        assert [t for t, _ in row.layers[-1].top] == [c.token_id for c in raw]
        np.testing.assert_allclose([lp for _, lp in row.layers[-1].top], [c.logprobs[0] for c in raw], atol=1e-3)
    (after,) = session.lens_reply(messages, output, positions=[len(output)])
    assert after.position == len(output) and not after.chosen_is_next
    for bad in ([len(output) + 1], [3, 1], []):
        with pytest.raises(EngineError, match="positions"):
            list(session.lens_reply(messages, output, positions=bad))
    text_rows = list(session.lens_text("the cat sat on the mat", positions=[0, 2]))
    assert [r.position for r in text_rows] == [0, 2]
