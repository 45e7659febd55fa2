"""Test references for GGUF: llama.cpp's byte-level BPE, and tiny GGUFs written like llama.cpp's converter.

``ReferenceBPE`` is a plain reimplementation of llama.cpp's byte-level BPE tokenizer.

Special (control) tokens are split out first, each text piece goes through the
pre-tokenizer regexes of llama.cpp's ``regex_exprs`` (for ``smollm``: digits
one by one, then the GPT-2 expression), bytes map to GPT-2's printable
alphabet, and merges apply lowest rank first.
"""

from __future__ import annotations

import numpy as np
import regex

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def bytes_to_unicode() -> dict[int, str]:
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(printable, map(chr, chars), strict=True))


class ReferenceBPE:
    def __init__(self, tokens: list[str], merges: list[str], types: list[int], digits_first: bool):
        self.vocab = {t: i for i, t in enumerate(tokens)}
        self.ranks = {tuple(m.split(" ", 1)): i for i, m in enumerate(merges)}
        self.specials = sorted((t for t, k in zip(tokens, types, strict=True) if k == 3), key=len, reverse=True)
        self.byte_map = bytes_to_unicode()
        self.digits_first = digits_first

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece, special in self._split_specials(text):
            if special:
                ids.append(self.vocab[piece])
            else:
                for word in self._pretokenize(piece):
                    ids.extend(self._bpe(word))
        return ids

    def _split_specials(self, text: str):
        if not self.specials:
            yield text, False
            return
        pattern = "(" + "|".join(regex.escape(s) for s in self.specials) + ")"
        for i, part in enumerate(regex.split(pattern, text)):
            if part:
                yield part, i % 2 == 1

    def _pretokenize(self, text: str) -> list[str]:
        pieces = [text]
        if self.digits_first:
            pieces = [p for chunk in pieces for p in regex.split(r"(\p{N})", chunk) if p]
        return [w for p in pieces for w in regex.findall(GPT2, p)]

    def _bpe(self, word: str) -> list[int]:
        symbols = ["".join(self.byte_map[b] for b in ch.encode("utf-8")) for ch in word]
        symbols = [c for s in symbols for c in s]
        while len(symbols) > 1:
            pairs = [
                (self.ranks.get((a, b), None), i) for i, (a, b) in enumerate(zip(symbols, symbols[1:], strict=False))
            ]
            pairs = [(r, i) for r, i in pairs if r is not None]
            if not pairs:
                break
            _, i = min(pairs)
            symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
        return [self.vocab[s] for s in symbols]


# --- Tiny GGUF files written the way llama.cpp's convert_hf_to_gguf.py writes them ---------------

SPM_PIECES = ["▁", "▁t", "he", "▁the", "▁a", "in", "▁in", "re", "▁he", "at", "▁h", "▁c", "it", "▁it", "is", "▁is"]
SPM_LETTERS = list("abcdefghijklmnopqrstuvwxyz") + ["▁▁", "▁▁▁▁", ".", ",", "!", "?"]
SPM_CHAT = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
    "{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
)


def bpe_vocab() -> dict:
    """tokenizer.ggml.* for tests/support/tiny_model.py's byte-level BPE tokenizer (model "gpt2")."""
    from tests.support.tiny_model import CHATML, MERGES, build_tokenizer

    vocab = sorted(build_tokenizer().get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    return {
        "model": "gpt2",
        "pre": "gpt2",
        "tokens": tokens,
        "types": [3 if t.startswith("<|") else 1 for t in tokens],
        "merges": [f"{a} {b}" for a, b in MERGES],
        "bos": tokens.index("<|endoftext|>"),
        "eos": tokens.index("<|im_end|>"),
        "add_bos": False,
        "chat_template": CHATML,
    }


def spm_vocab() -> dict:
    """A small SentencePiece vocabulary (model "llama"): control, byte-fallback and scored pieces."""
    tokens = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"]
    types = [2, 3, 3, 3, 3]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [6] * 256
    # SentencePiece scores rank the merges: the longer pieces score higher than the letters
    scores = [0.0] * len(tokens) + [-100.0 - i for i in range(len(SPM_LETTERS))]
    scores += [-float(i) for i in range(len(SPM_PIECES))]
    pieces = SPM_LETTERS + SPM_PIECES
    tokens += pieces
    types += [1] * len(pieces)
    return {
        "model": "llama",
        "tokens": tokens,
        "types": types,
        "scores": scores,
        "bos": 1,
        "eos": 2,
        "unk": 0,
        "add_bos": True,
        "chat_template": SPM_CHAT,
    }


def add_vocab(writer, vocab: dict) -> None:
    writer.add_tokenizer_model(vocab["model"])
    if "pre" in vocab:
        writer.add_tokenizer_pre(vocab["pre"])
    writer.add_token_list(vocab["tokens"])
    writer.add_token_types(vocab["types"])
    if "scores" in vocab:
        writer.add_token_scores(vocab["scores"])
    if "merges" in vocab:
        writer.add_token_merges(vocab["merges"])
    writer.add_bos_token_id(vocab["bos"])
    writer.add_eos_token_id(vocab["eos"])
    if "unk" in vocab:
        writer.add_unk_token_id(vocab["unk"])
    writer.add_add_bos_token(vocab["add_bos"])
    writer.add_chat_template(vocab["chat_template"])


# where each block keeps its float16 fields (d, and dmin / m where the type has one)
F16_FIELDS = {
    "Q4_0": (0,),
    "Q4_1": (0, 2),
    "Q5_0": (0,),
    "Q5_1": (0, 2),
    "Q8_0": (0,),
    "Q2_K": (80, 82),
    "Q3_K": (108,),
    "Q4_K": (0, 2),
    "Q5_K": (0, 2),
    "Q6_K": (208,),
}


def random_blocks(qtype, rows: int, cols: int, rng: np.random.Generator, size: float = 0.1) -> np.ndarray:
    """Random blocks of ``qtype`` (for types gguf-py cannot quantize): random bytes, finite float16
    scales, scaled so the weights' standard deviation is about ``size``. Returns [rows, bytes per row]."""
    import gguf

    block, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows * cols // block, block_bytes), dtype=np.uint8)
    fields = F16_FIELDS[qtype.name]
    scales = rng.normal(0.0, 1.0, size=(raw.shape[0], len(fields)))
    for attempt in range(2):
        for i, start in enumerate(fields):
            raw[:, start : start + 2] = scales[:, i : i + 1].astype(np.float16).view(np.uint8)
        if attempt == 0:  # dequantization is linear in the scales: rescale once to the wanted size
            scales *= size / float(gguf.quants.dequantize(raw.reshape(rows, -1), qtype).std())
    return raw.reshape(rows, -1)


def permute_for_gguf(w: np.ndarray, heads: int) -> np.ndarray:
    """The Q/K row order llama.cpp's converter writes (LlamaModel.permute: interleaved rotary halves)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def random_model(config: dict, seed: int = 0, norm_center: float = 1.0):
    """An mlx-lm model of ``config["model_type"]`` with random float32 weights (norms near ``norm_center``)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_lm.utils import _get_classes

    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    rng = np.random.default_rng(seed)
    weights = []
    for name, param in tree_flatten(model.parameters()):
        if "norm" in name:
            value = norm_center + rng.normal(0.0, 0.1, param.shape)
        else:
            value = rng.normal(0.0, 0.08 if "embed" in name else 0.15, param.shape)
        weights.append((name, mx.array(value.astype(np.float32))))
    model.update(tree_unflatten(weights))
    mx.eval(model.parameters())
    return model


def write_model_gguf(
    path,
    arch: str,
    model,
    config: dict,
    vocab: dict,
    metadata: dict | None = None,
    types: dict | None = None,
    extra_tensors: dict | None = None,
):
    """Write ``model`` as llama.cpp's converter would: gguf-py's name table, llama's Q/K permutation,
    Gemma's norms + 1, and its metadata keys. ``types`` maps a GGUF tensor name to a quantization
    type (default F32); returns {GGUF name: gguf-py's dequantization of what was written}."""
    import gguf
    import mlx.core as mx
    from mlx.utils import tree_flatten

    arch_enum = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    table = gguf.get_tensor_name_map(arch_enum, config["num_hidden_layers"])
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config.get("max_position_embeddings", 2048))
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config.get("num_key_value_heads", config["num_attention_heads"]))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_vocab_size(config["vocab_size"])
    if "rope_theta" in config:
        writer.add_rope_freq_base(config["rope_theta"])
    if "head_dim" in config:
        writer.add_key_length(config["head_dim"])
        writer.add_value_length(config["head_dim"])
    for key, value in (metadata or {}).items():
        if isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_uint32(key, value)
    add_vocab(writer, vocab)
    written = {}
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    for name, value in tree_flatten(model.parameters()):
        key = table.get_name(name, try_suffixes=(".weight", ".bias"))
        assert key is not None, name
        w = np.array(value.astype(mx.float32))
        if arch == "llama" and key.endswith(("attn_q.weight", "attn_q.bias")):
            w = permute_for_gguf(w, heads)
        if arch == "llama" and key.endswith(("attn_k.weight", "attn_k.bias")):
            w = permute_for_gguf(w, kv_heads)
        if arch in ("gemma2", "gemma3") and key.endswith("norm.weight"):
            w = w + 1
        qtype = (types or {}).get(key, gguf.GGMLQuantizationType.F32)
        if qtype == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(key, w)
            written[key] = w
        else:
            try:
                data = gguf.quants.quantize(w, qtype)
            except NotImplementedError:  # K-quants: gguf-py only dequantizes them
                data = random_blocks(qtype, *w.shape, np.random.default_rng(len(written)))
            writer.add_tensor(key, data, raw_shape=data.shape, raw_dtype=qtype)
            written[key] = gguf.quants.dequantize(data, qtype).reshape(w.shape)
    for key, value in (extra_tensors or {}).items():
        writer.add_tensor(key, np.asarray(value, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return written
