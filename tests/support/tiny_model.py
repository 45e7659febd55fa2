"""A tiny random-weight llama with a byte-level BPE tokenizer, written as an mlx-lm folder."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm.models import llama
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from tokenizers.pre_tokenizers import ByteLevel

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a")]


def tiny_config(vocab_size: int, context: int = 512, eos_id: int = 2 + 256 + len(MERGES)) -> dict:
    return {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab_size,
        "max_position_embeddings": context,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "eos_token_id": [eos_id],  # <|im_end|> unless told
    }


def build_tokenizer() -> Tokenizer:
    alphabet = ByteLevel.alphabet()
    byte_chars = sorted(alphabet)
    vocab = {c: i for i, c in enumerate(byte_chars)}
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=MERGES))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    return tokenizer


def write_tiny_model(
    folder: Path,
    seed: int = 0,
    dtype: str = "float32",
    tokenizer: Tokenizer | None = None,
    template: str = CHATML,
    eos_token: str = "<|im_end|>",
) -> Path:
    """``tokenizer``, ``template`` and ``eos_token``: another vocabulary's (the reasoning
    models of tests/support/tiny_reasoning.py)."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = tokenizer or build_tokenizer()
    vocab_size = tokenizer.get_vocab_size() + 3  # a few ids the tokenizer never makes
    config = tiny_config(vocab_size, eos_id=tokenizer.token_to_id(eos_token))
    model = llama.Model(llama.ModelArgs.from_dict(config))
    rng = np.random.default_rng(seed)
    weights = {}
    for name, param in tree_flatten(model.parameters()):
        if "norm" in name:
            value = np.ones(param.shape, np.float32)
        else:
            value = rng.normal(0.0, 0.08 if "embed" in name else 0.15, param.shape)
        weights[name] = mx.array(value.astype(np.float32)).astype(getattr(mx, dtype))
    mx.save_safetensors(str(folder / "model.safetensors"), weights)
    (folder / "config.json").write_text(json.dumps(config))
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "eos_token": eos_token,
                "pad_token": "<|endoftext|>",
                "chat_template": template,
                "clean_up_tokenization_spaces": False,
            }
        )
    )
    (folder / "chat_template.jinja").write_text(template)
    return folder
