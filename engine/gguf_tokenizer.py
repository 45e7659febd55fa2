"""Build a Hugging Face ``tokenizer.json`` from a GGUF file's ``tokenizer.ggml.*`` metadata.

Only byte-level BPE vocabularies (``tokenizer.ggml.model == "gpt2"``) are
supported. The pre-tokenizer follows llama.cpp's ``regex_exprs`` for the
file's ``tokenizer.ggml.pre`` type, so ids match llama.cpp's own tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from engine.errors import ModelLoadError

TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4

_GPT2 = "gpt2"  # the GPT-2 regex that ByteLevel(use_regex=True) applies
_DIGITS_THEN_GPT2 = "digits+gpt2"  # llama.cpp: "\p{N}" isolated, then the GPT-2 regex
_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# tokenizer.ggml.pre -> pre-tokenizer, as llama.cpp's llama-vocab.cpp groups them.
PRE_TOKENIZERS: dict[str, str] = {
    "default": _GPT2,
    "gpt2": _GPT2,
    "gpt-2": _GPT2,
    "mpt": _GPT2,
    "olmo": _GPT2,
    "jais": _GPT2,
    "smollm": _DIGITS_THEN_GPT2,
    "starcoder": _DIGITS_THEN_GPT2,
    "refact": _DIGITS_THEN_GPT2,
    "command-r": _DIGITS_THEN_GPT2,
    "codeshell": _DIGITS_THEN_GPT2,
    "exaone": _DIGITS_THEN_GPT2,
    "llama-bpe": _LLAMA3,
    "llama3": _LLAMA3,
    "qwen2": _QWEN2,
}


def _ints(value: Any) -> list[int]:
    if isinstance(value, mx.array):
        return [int(v) for v in value.tolist()]
    return [int(v) for v in value]


def _opt_int(metadata: dict[str, Any], key: str) -> int | None:
    value = metadata.get(key)
    return None if value is None else int(value.item() if isinstance(value, mx.array) else value)


def _pre_tokenizer(kind: str) -> pre_tokenizers.PreTokenizer:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=kind != "custom")
    if kind == _GPT2:
        return byte_level
    if kind == _DIGITS_THEN_GPT2:
        return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"), byte_level])
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(kind), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def build_tokenizer(metadata: dict[str, Any], path: Path) -> tuple[Tokenizer, dict[str, Any]]:
    """The tokenizer and the facts about it that tokenizer_config.json needs."""
    kind = metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ModelLoadError(path, f"unsupported tokenizer model {kind!r} (supported: byte-level BPE 'gpt2')")
    pre = metadata.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise ModelLoadError(path, f"unsupported pre-tokenizer {pre!r}")
    tokens: list[str] = list(metadata.get("tokenizer.ggml.tokens", []))
    merges: list[str] = list(metadata.get("tokenizer.ggml.merges", []))
    if not tokens or not merges:
        raise ModelLoadError(path, "GGUF metadata lacks tokenizer tokens or merges")
    types = _ints(metadata.get("tokenizer.ggml.token_type", [1] * len(tokens)))

    vocab = {token: i for i, token in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
    tokenizer.pre_tokenizer = _pre_tokenizer(PRE_TOKENIZERS[pre])
    tokenizer.decoder = decoders.ByteLevel()
    added = [
        AddedToken(tokens[i], special=t == TOKEN_TYPE_CONTROL, normalized=False)
        for i, t in enumerate(types)
        if t in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)
    ]
    tokenizer.add_tokens(added)

    bos = _opt_int(metadata, "tokenizer.ggml.bos_token_id")
    eos = _opt_int(metadata, "tokenizer.ggml.eos_token_id")
    add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", mx.array(False)).item())
    if add_bos and bos is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{tokens[bos]} $A",
            pair=f"{tokens[bos]} $A $B",
            special_tokens=[(tokens[bos], bos)],
        )
    eos_ids = [i for i in (eos, _opt_int(metadata, "tokenizer.ggml.eot_token_id")) if i is not None]
    facts = {
        "bos": None if bos is None else tokens[bos],
        "eos": None if eos is None else tokens[eos],
        "eos_ids": sorted(set(eos_ids)),
        "add_bos": add_bos,
        "chat_template": metadata.get("tokenizer.chat_template"),
    }
    return tokenizer, facts


def write_tokenizer_files(metadata: dict[str, Any], out_dir: Path, path: Path) -> list[int]:
    """Write tokenizer.json, tokenizer_config.json (and the chat template); return EOS ids."""
    tokenizer, facts = build_tokenizer(metadata, path)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
        "add_bos_token": facts["add_bos"],
        "model_max_length": 1_000_000,
    }
    if facts["bos"] is not None:
        config["bos_token"] = facts["bos"]
    if facts["eos"] is not None:
        config["eos_token"] = facts["eos"]
        config["pad_token"] = facts["eos"]
    if facts["chat_template"]:
        config["chat_template"] = facts["chat_template"]
        (out_dir / "chat_template.jinja").write_text(facts["chat_template"])
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return facts["eos_ids"]
