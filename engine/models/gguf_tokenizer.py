"""The Hugging Face tokenizer of a GGUF file, built by transformers' own GGUF conversion.

transformers turns a GGUF's ``tokenizer.ggml.*`` metadata into a fast tokenizer
(``transformers.integrations.gguf.convert_gguf_tokenizer``): byte-level BPE for
``gpt2`` vocabularies, SentencePiece-style BPE with byte fallback for ``llama``
ones (with Gemma's and Phi-3's variants), the control tokens as special tokens,
and the pre-tokenizer split for the file's ``tokenizer.ggml.pre``. Here the
metadata comes from the already-validated reader (``engine.models.gguf_read``), is
checked for the types and ranges transformers assumes, and is handed to that
conversion; the result is saved with ``save_pretrained`` so ``mlx_lm.load``
reads it like any folder.

One correction: transformers has no split for the pre-tokenizer types that
llama.cpp treats as "digits one by one, then GPT-2" (``smollm``, ``starcoder``,
...). For those the llama.cpp split is used, so ids match llama.cpp's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import Regex, pre_tokenizers

from engine.api.errors import ModelLoadError
from engine.library.convertible import TOKENIZER_MODELS
from engine.models.chat_templates import fallback_template

TOKEN_TYPE_CONTROL = 3
# tokenizer.ggml.pre values llama.cpp splits as GPT-2 does (transformers' default for byte-level BPE) ...
_GPT2_PRE = ("default", "gpt2", "gpt-2", "mpt", "olmo", "jais", "poro-chat", "viking", "trillion", "bloom")
# ... and those it splits as "each digit alone, then GPT-2", which transformers has no entry for.
_DIGITS_PRE = ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone")
# transformers' tokenizer-dict key -> GGUF metadata key (as in its get_gguf_tokenizer)
_DICT_KEYS = {
    "tokenizer_type": "tokenizer.ggml.model",
    "pre_tokenizer_type": "tokenizer.ggml.pre",
    "tokens": "tokenizer.ggml.tokens",
    "scores": "tokenizer.ggml.scores",
    "token_type": "tokenizer.ggml.token_type",
    "merges": "tokenizer.ggml.merges",
    "bos_token_id": "tokenizer.ggml.bos_token_id",
    "eos_token_id": "tokenizer.ggml.eos_token_id",
    "unk_token_id": "tokenizer.ggml.unknown_token_id",
    "pad_token_id": "tokenizer.ggml.padding_token_id",
    "add_prefix_space": "tokenizer.ggml.add_space_prefix",
}
_SPECIAL_IDS = {
    "bos_token": "tokenizer.ggml.bos_token_id",
    "eos_token": "tokenizer.ggml.eos_token_id",
    "unk_token": "tokenizer.ggml.unknown_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
}
_EOS_IDS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")
# Tokens llama.cpp ends generation on by their text whatever the metadata says
# (llama-vocab.cpp, "maintain a list of tokens that cause end-of-generation"): a Gemma
# file names only <eos>, yet its chat turns end with <end_of_turn>.
_EOG_TEXTS = frozenset(
    {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[",
    }
)  # fmt: skip


def _pre_tokenizer_types() -> set[str]:
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS
    except ImportError:  # transformers 4.x: no per-type splits
        return set()
    return set(GGUF_PRE_TOKENIZER_SPLITS)


def _transformers_api() -> tuple[Any, Any]:
    """(convert_gguf_tokenizer, the fast tokenizer class) in transformers 5 or 4."""
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer
        from transformers.tokenization_utils_tokenizers import TokenizersBackend as Fast
    except ImportError:  # transformers 4.x
        from transformers import PreTrainedTokenizerFast as Fast
        from transformers.integrations.ggml import convert_gguf_tokenizer
    return convert_gguf_tokenizer, Fast


def _check(metadata: Mapping[str, Any], path: Path) -> tuple[str, list[str]]:
    """Check the tokenizer metadata transformers will index into; return (model, tokens)."""

    def fail(reason: str) -> ModelLoadError:
        return ModelLoadError(path, reason)

    kind = metadata.get("tokenizer.ggml.model")
    if kind not in TOKENIZER_MODELS:
        raise fail(f"unsupported tokenizer model {kind!r} (supported: byte-level BPE 'gpt2', SentencePiece 'llama')")
    tokens = metadata.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise fail("GGUF metadata lacks the tokenizer's token list")
    n = len(tokens)
    for key, kinds in (("token_type", int), ("scores", int | float)):
        values = metadata.get(f"tokenizer.ggml.{key}")
        if values is not None and (
            not isinstance(values, list) or len(values) != n or not all(isinstance(v, kinds) for v in values)
        ):
            raise fail(f"tokenizer.ggml.{key} does not have one number per token")
    merges = metadata.get("tokenizer.ggml.merges")
    if kind == "gpt2" and not merges:
        raise fail("GGUF metadata lacks the tokenizer's merges")
    if merges is not None and (
        not isinstance(merges, list) or not all(isinstance(m, str) and m.count(" ") == 1 for m in merges)
    ):
        raise fail("tokenizer.ggml.merges holds an entry that is not two tokens separated by a space")
    if kind == "llama" and merges is None and metadata.get("tokenizer.ggml.scores") is None:
        raise fail("a SentencePiece tokenizer needs tokenizer.ggml.scores or tokenizer.ggml.merges")
    for key in (*_SPECIAL_IDS.values(), *_EOS_IDS):
        value = metadata.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < n):
            raise fail(f"{key} = {value!r} is not a token id (0..{n - 1})")
    for key in ("tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", "tokenizer.ggml.add_space_prefix"):
        if metadata.get(key) is not None and not isinstance(metadata[key], bool):
            raise fail(f"{key} is not true or false")
    template = metadata.get("tokenizer.chat_template")
    if template is not None and not isinstance(template, str):
        raise fail("tokenizer.chat_template is not a string")
    if kind == "gpt2":
        pre = metadata.get("tokenizer.ggml.pre", "default")
        if pre not in (*_GPT2_PRE, *_DIGITS_PRE) and pre not in _pre_tokenizer_types():
            raise fail(f"unsupported pre-tokenizer {pre!r}")
    return kind, tokens


def tokenizer_inputs(metadata: Mapping[str, Any], path: Path, arch: str = "") -> tuple[dict, dict]:
    """(tokenizer dict, tokenizer config) in the shape transformers' get_gguf_tokenizer returns."""
    kind, tokens = _check(metadata, path)
    tokenizer = {name: metadata[key] for name, key in _DICT_KEYS.items() if key in metadata}
    config: dict[str, Any] = {}
    template = metadata.get("tokenizer.chat_template") or fallback_template(arch, tokens)
    if template:
        config["chat_template"] = template
    for key in ("add_bos_token", "add_eos_token"):
        if f"tokenizer.ggml.{key}" in metadata:
            config[key] = metadata[f"tokenizer.ggml.{key}"]
    if kind == "llama":
        config.setdefault("add_bos_token", True)  # llama.cpp adds BOS to SentencePiece unless told otherwise
    for name, key in _SPECIAL_IDS.items():
        config[name] = tokens[metadata[key]] if key in metadata else None
    return tokenizer, config


def build_tokenizer(arch: str, metadata: Mapping[str, Any], path: Path) -> Any:
    """A transformers fast tokenizer, as ``AutoTokenizer.from_pretrained(..., gguf_file=...)`` builds it."""
    convert_gguf_tokenizer, fast_class = _transformers_api()
    tokenizer_dict, config = tokenizer_inputs(metadata, path, arch)
    try:
        backend, extra = convert_gguf_tokenizer(arch, tokenizer_dict)
        if tokenizer_dict["tokenizer_type"] == "gpt2" and tokenizer_dict.get("pre_tokenizer_type") in _DIGITS_PRE:
            backend.pre_tokenizer = pre_tokenizers.Sequence(
                [
                    pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
                ]
            )
        return fast_class(tokenizer_object=backend, **config, **extra)
    except Exception as exc:  # transformers' own checks on the vocabulary
        raise ModelLoadError(path, f"cannot build the tokenizer ({type(exc).__name__}: {exc})") from None


def eos_token_ids(metadata: Mapping[str, Any]) -> list[int]:
    """The end-of-generation ids llama.cpp uses: the EOS/EOT/EOM keys and the tokens it
    recognizes by their text (less harmony's ``<|end|>``, which ends a message, not a reply)."""
    ids = {metadata[key] for key in _EOS_IDS if isinstance(metadata.get(key), int)}
    tokens = metadata.get("tokenizer.ggml.tokens") or []
    by_text = {text: i for i, text in enumerate(tokens) if text in _EOG_TEXTS}
    if "<|end|>" in by_text and "<|call|>" in by_text and ("<|return|>" in by_text or "<|flush|>" in by_text):
        del by_text["<|end|>"]
    return sorted(ids | set(by_text.values()))


def write_tokenizer_files(arch: str, metadata: Mapping[str, Any], out_dir: Path, path: Path) -> list[int]:
    """Write tokenizer.json, tokenizer_config.json and the chat template; return the EOS ids."""
    tokenizer = build_tokenizer(arch, metadata, path)
    tokenizer.save_pretrained(str(out_dir))
    return eos_token_ids(metadata)
