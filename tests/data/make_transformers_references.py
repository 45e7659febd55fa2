"""Writes tests/data/references-gemma3.npz and references-smollm2.npz: transformers' float32
numbers for the real models' checks (tests/support/references.py says how they are kept and
read). Run it again when a model file, a checked text or transformers changes:

    .venv/bin/python -m tests.data.make_transformers_references

transformers reads the GGUF file itself (gguf-py dequantizes it) and runs its own
implementation; the engine is used only to turn the tests' texts into the same token ids the
tests encode (the ids are kept and a test whose ids differ fails)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from tests.support import real_models, reference_packages
from tests.support.paths import DATA
from tests.support.references import top_rows


def _greedy(model, prompt: list[int], steps: int, eos: frozenset[int]) -> tuple[list[int], np.ndarray]:
    """transformers' greedy path (argmax, ending at an end of sequence or after ``steps``) and
    the log-softmax each token was chosen from."""
    tokens: list[int] = []
    for _ in range(steps):
        token = int(np.argmax(real_models.reference_logprobs(model, prompt + tokens)[-1]))
        tokens.append(token)
        if token in eos:
            break
    rows = real_models.reference_logprobs(model, prompt + tokens)[len(prompt) - 1 : len(prompt) - 1 + len(tokens)]
    return tokens, rows


class _Writer:
    def __init__(self, gguf: Path) -> None:
        from engine.models.load import file_hash

        self.arrays: dict[str, np.ndarray] = {}
        self.meta: dict = {"file": gguf.name, "sha256": file_hash(gguf), "positions": {}, "layers": {}}
        import transformers

        self.meta["transformers"] = transformers.__version__

    def rows(self, key: str, logprobs: np.ndarray) -> None:
        kept = top_rows(logprobs)
        self.arrays[f"{key}.ids"], self.arrays[f"{key}.values"] = kept.ids, kept.values

    def logprobs(self, name: str, model, ids: list[int], positions: list[int] | None = None) -> None:
        self.arrays[f"{name}.input"] = np.array(ids, np.int32)
        full = real_models.reference_logprobs(model, ids)
        if positions is None:
            self.rows(name, full[:-1])
        else:
            self.rows(name, full[positions])
            self.meta["positions"][name] = positions

    def greedy(self, name: str, model, prompt: list[int], steps: int, eos: frozenset[int]) -> None:
        tokens, rows = _greedy(model, prompt, steps, eos)
        self.arrays[f"{name}.input"] = np.array(prompt, np.int32)
        self.arrays[f"{name}.tokens"] = np.array(tokens, np.int32)
        self.rows(name, rows)

    def lens(self, name: str, model, ids: list[int]) -> None:
        from tests.engine.analysis.test_lens import reference_lens

        self.arrays[f"{name}.input"] = np.array(ids, np.int32)
        layers = reference_lens(model, ids)
        for layer, logprobs in enumerate(layers):
            self.rows(f"{name}.{layer}", logprobs)
        self.meta["layers"][name] = len(layers)

    def save(self, model: str) -> Path:
        path = DATA / f"references-{model}.npz"
        np.savez_compressed(path, meta=np.array(json.dumps(self.meta)), **self.arrays)
        return path


def gemma3(folder: Path) -> Path:
    import torch

    from engine.models.load import load
    from engine.runtime.prompts import encode_chat, encode_text
    from tests.engine.analysis.test_lens import GEMMA_TEXT
    from tests.integration.test_fidelity_real import CHAT, GREEDY, TEXT, sliding_ids

    gguf = real_models.gemma_gguf(folder)
    loaded, model = load(str(gguf)), real_models.transformers_float32(gguf)
    tok, eos = loaded.tokenizer, frozenset(loaded.eos_token_ids)
    out = _Writer(gguf)
    config = model.config
    embed = model.model.embed_tokens
    out.meta.update(
        sliding_window=config.sliding_window, layer_types=list(config.layer_types), embed_scale=float(embed.embed_scale)
    )
    keys = ("gemma3.attention.sliding_window", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.add_bos_token")
    read = real_models.gguf_metadata(gguf, (*keys, "tokenizer.ggml.tokens"))
    tokens = read.pop("tokenizer.ggml.tokens")
    out.meta["gguf"] = {**read, "token_ids": {name: tokens.index(name) for name in ("<end_of_turn>", "<eos>")}}
    out.logprobs("text", model, encode_text(tok, TEXT))
    out.logprobs("chat", model, encode_chat(tok, CHAT) + encode_text(tok, "Rome.")[1:])
    out.greedy("greedy_text", model, encode_text(tok, "The capital of France is"), GREEDY.max_tokens, eos)
    out.greedy("greedy_chat", model, encode_chat(tok, CHAT), GREEDY.max_tokens, eos)
    out.logprobs("sliding", model, sliding_ids(tok), list(range(590, 619)))
    ids = encode_text(tok, GEMMA_TEXT)
    out.lens("lens", model, ids)
    # mlx-lm's gemma3_text multiplies by √640 rounded to bfloat16 (25.25, not 25.2982).
    embed.embed_scale.fill_(float(torch.tensor(640**0.5).to(torch.bfloat16)))
    out.lens("lens_bf16_scale", model, ids)
    return out.save("gemma3")


def smollm2() -> Path:
    from engine.models.load import load
    from engine.runtime.prompts import encode_chat, encode_text
    from tests.engine.analysis.test_lens import TEXT as LENS_TEXT
    from tests.integration.test_fidelity_real import GREEDY, LLAMA_CHAT, TEXT

    gguf = real_models.smollm_gguf()
    loaded, model = load("default"), real_models.transformers_float32(gguf)
    tok = loaded.tokenizer
    out = _Writer(gguf)
    out.logprobs("text", model, encode_text(tok, TEXT))
    out.greedy("greedy_chat", model, encode_chat(tok, LLAMA_CHAT), GREEDY.max_tokens, frozenset(loaded.eos_token_ids))
    out.lens("lens", model, encode_text(tok, LENS_TEXT))
    return out.save("smollm2")


def main() -> None:
    reference_packages.use()  # PyTorch, before anything imports transformers
    with tempfile.TemporaryDirectory() as folder:
        print(gemma3(Path(folder)))
    print(smollm2())


if __name__ == "__main__":
    main()
