"""Tiny random-weight reasoning models with their makers' real chat templates: a
Qwen3-style one (Qwen3's template, with ``enable_thinking``, and its added tokens
``<think>`` / ``</think>``, not special, as in Qwen3's tokenizer) and a gpt-oss-style one
(the harmony template and its special tokens). Random weights never emit a marker by
themselves: tests force or bias them (``logit_bias``, the thinking budget).

``tests/data/qwen3_chat_template.jinja`` is the chat template the Qwen3 models (Apache-2.0)
are published with; ``tests/data/gpt_oss_chat_template.jinja`` gpt-oss's (Apache-2.0)."""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken, Tokenizer

from tests.support.paths import DATA
from tests.support.tiny_model import build_tokenizer, write_tiny_model

QWEN3_TEMPLATE = (DATA / "qwen3_chat_template.jinja").read_text()
HARMONY_SPECIALS = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"]


def qwen3_tokenizer() -> Tokenizer:
    tokenizer = build_tokenizer()
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in ("<think>", "</think>")])
    return tokenizer


def write_qwen3_style(folder: Path, seed: int = 0) -> Path:
    return write_tiny_model(folder, seed, tokenizer=qwen3_tokenizer(), template=QWEN3_TEMPLATE)


def harmony_tokenizer() -> Tokenizer:
    tokenizer = build_tokenizer()
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in HARMONY_SPECIALS])
    return tokenizer


def write_harmony_style(folder: Path, seed: int = 0) -> Path:
    template = (DATA / "gpt_oss_chat_template.jinja").read_text()
    return write_tiny_model(folder, seed, tokenizer=harmony_tokenizer(), template=template, eos_token="<|return|>")
