"""GGUF tokenizers: the converted folder's ids equal transformers' own tokenization of the same GGUF
(``AutoTokenizer.from_pretrained(folder, gguf_file=name)``), for byte-level BPE (the default model) and
SentencePiece (a small vocabulary written with gguf-py), on plain text and through the chat template."""

import pytest

from engine.models.load import default_model_path, load
from engine.runtime.prompts import encode_chat
from tests.support.gguf_reference import random_model, spm_vocab, write_model_gguf

pytest.importorskip("torch")  # transformers reads GGUF metadata for AutoTokenizer with torch installed

TEXTS = [
    "The capital of France is",
    "Hello, world! It's 2026-11-22 and we've got 1234567 tokens.\n\n  Indented\tcode();",
    "Ünïcödé — emoji 🙂 and 日本語 text, plus   trailing spaces   ",
    " leading space, then the heat in the thin tin",
]
CONVERSATION = [
    {"role": "user", "content": "What is the heat in it?"},
    {"role": "assistant", "content": "It is hot."},
    {"role": "user", "content": "And 3+3?"},
]


def transformers_tokenizer(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def check_same_ids(loaded, reference, conversation):
    for text in TEXTS:
        ids = loaded.tokenizer.encode(text)
        assert ids == reference.encode(text), text
        assert loaded.tokenizer.decode(ids, skip_special_tokens=True).strip() == text.strip()
    rendered = loaded.tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    assert rendered == reference.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    assert encode_chat(loaded.tokenizer, conversation) == reference.encode(rendered, add_special_tokens=False)


def test_bpe_default_model_matches_transformers(smollm):
    reference = transformers_tokenizer(default_model_path())
    check_same_ids(smollm, reference, [{"role": "system", "content": "You are terse."}, *CONVERSATION])
    assert smollm.tokenizer.bos_token == reference.bos_token
    assert smollm.tokenizer.eos_token == reference.eos_token


@pytest.fixture(scope="module")
def spm_gguf(tmp_path_factory):
    vocab = spm_vocab()
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 1,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "rms_norm_eps": 1e-5,
        "vocab_size": len(vocab["tokens"]),
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
    }
    path = tmp_path_factory.mktemp("spm") / "spm.gguf"
    write_model_gguf(path, "llama", random_model(config), config, vocab)
    return path


def test_sentencepiece_gguf_matches_transformers(spm_gguf):
    loaded = load(str(spm_gguf))
    reference = transformers_tokenizer(spm_gguf)
    check_same_ids(loaded, reference, CONVERSATION)
    ids = loaded.tokenizer.encode("the heat")
    assert ids[0] == 1  # llama.cpp adds BOS to SentencePiece vocabularies
    tokens = loaded.tokenizer.convert_ids_to_tokens(ids)
    assert tokens[:3] == ["<s>", "▁the", "▁he"]
    assert "<0xF0>" in loaded.tokenizer.convert_ids_to_tokens(loaded.tokenizer.encode("🙂"))  # byte fallback
    chat = encode_chat(loaded.tokenizer, CONVERSATION)
    assert chat[:2] == [1, 3] and 2 in chat  # <s> [INST] ... </s>
    assert 2 in loaded.eos_token_ids
