"""What the GGUF converter (``engine/models/gguf_*.py``) takes: architectures, tensor types and
tokenizers. Plain tables, here rather than beside the converter so that the library decides
whether a file on disk will load (``engine.library.support``) without importing the converter,
which loads MLX.
"""

from __future__ import annotations

from gguf import GGMLQuantizationType as T

ARCHITECTURES = {
    "llama": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "gemma2": "gemma2",
    "gemma3": "gemma3_text",
    "phi3": "phi3",
}
"""GGUF ``general.architecture`` -> mlx-lm ``model_type``."""
FLOAT_TYPES = (T.F32, T.F16, T.BF16)
"""Kept in their type."""
AFFINE_BITS = {T.Q4_0: 4, T.Q4_1: 4, T.Q5_0: 5, T.Q5_1: 5, T.Q8_0: 8, T.Q4_K: 4, T.Q5_K: 5}
"""Repacked bit for bit into MLX's affine quantization, with these bits."""
TO_FLOAT16 = (T.Q2_K, T.Q3_K, T.Q6_K)
"""Dequantized to float16 (sub-blocks of 16 weights: a group size MLX does not have)."""
SUPPORTED = (*FLOAT_TYPES, *AFFINE_BITS, *TO_FLOAT16)
TOKENIZER_MODELS = ("gpt2", "llama")
"""``tokenizer.ggml.model`` values the converter builds a tokenizer for."""
