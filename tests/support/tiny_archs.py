"""Tiny random-weight mlx-lm folders of architectures with every cache kind mlx-lm batches:
``KVCache`` (llama, qwen3), ``RotatingKVCache`` sliding windows mixed with global layers
(gemma3_text, gpt_oss), and ``ArraysCache`` recurrent state mixed with attention
(qwen3_next, lfm2). Each uses the tiny byte-level BPE tokenizer of :mod:`tests.support.tiny_model`."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from tests.support.tiny_model import CHATML, build_tokenizer

WINDOW = 16  # sliding windows shorter than prompt + output, so rotating caches wrap

_COMMON = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512}
CONFIGS: dict[str, dict] = {
    "llama": {
        **_COMMON,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
    },
    "qwen2": {  # tensor and pipeline parallel in mlx-lm (its ``shard`` and ``PipelineMixin``)
        **_COMMON,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
    },
    "qwen3": {
        **_COMMON,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "rms_norm_eps": 1e-6,
        "head_dim": 16,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
    },
    "gemma3_text": {
        **_COMMON,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "head_dim": 16,
        "query_pre_attn_scalar": 16,
        "sliding_window": WINDOW,
        "sliding_window_pattern": 2,
    },
    "gpt_oss": {
        **_COMMON,
        "num_hidden_layers": 2,
        "intermediate_size": 64,
        "head_dim": 16,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "sliding_window": WINDOW,
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_theta": 10000,
    },
    "qwen3_next": {
        **_COMMON,
        "num_hidden_layers": 2,
        "full_attention_interval": 2,
        "intermediate_size": 128,
        "linear_num_value_heads": 4,
        "linear_num_key_heads": 2,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 4,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
        "shared_expert_intermediate_size": 64,
        "mlp_only_layers": [],
        "moe_intermediate_size": 32,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.5,
        "head_dim": 16,
    },
    "lfm2": {
        **_COMMON,
        "num_hidden_layers": 2,
        "norm_eps": 1e-5,
        "conv_bias": False,
        "conv_L_cache": 3,
        "block_dim": 64,
        "block_multiple_of": 16,
        "block_ffn_dim_multiplier": 1.0,
        "block_auto_adjust_ff_dim": False,
        "block_ff_dim": 128,
        "full_attn_idxs": [1],
    },
}


def write_tiny_arch(folder: Path, model_type: str, seed: int = 0, overrides: dict | None = None) -> Path:
    """An mlx-lm folder of ``model_type`` with random weights (float32); ``overrides``
    replace entries of its config (e.g. wider heads)."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    vocab_size = tokenizer.get_vocab_size() + 3
    config = {"model_type": model_type, "vocab_size": vocab_size, **CONFIGS[model_type], **(overrides or {})}
    config["eos_token_id"] = [tokenizer.token_to_id("<|im_end|>")]
    module = importlib.import_module(f"mlx_lm.models.{model_type}")
    model = module.Model(module.ModelArgs.from_dict(config))
    rng = np.random.default_rng(seed)
    weights = {}
    for name, param in tree_flatten(model.parameters()):
        if "norm" in name and "weight" in name:
            value = np.ones(param.shape) if model_type != "gemma3_text" else np.zeros(param.shape)
        else:
            value = rng.normal(0.0, 0.15, param.shape)
        weights[name] = mx.array(value.astype(np.float32)).astype(param.dtype)
    mx.save_safetensors(str(folder / "model.safetensors"), weights)
    (folder / "config.json").write_text(json.dumps(config))
    tokenizer.save(str(folder / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "chat_template": CHATML,
        "clean_up_tokenization_spaces": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    (folder / "chat_template.jinja").write_text(CHATML)
    return folder
