"""Two models on the same tokens: KL(base ‖ model) and the top tokens, token by token.

The text's token ids (from the base's tokenizer) run teacher-forced through each model,
chunk by chunk, each with its own KV cache; per scored position both raw distributions
are compared over the whole vocabulary. The base's rows come either from the base model
itself (both loaded) or from a file written by an earlier pass (:class:`BaseFile`), so two
models that do not fit in memory together run one after the other, as
``llama-perplexity --kl-divergence-base`` does. Statistics: :mod:`engine.api.kld_stats`.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import mlx.core as mx
import numpy as np

from engine.analysis.fidelity import raw_logprobs
from engine.analysis.kl import kl_divergences
from engine.api.errors import EngineError
from engine.api.results import TokenKLD
from engine.caches import batch as kv
from engine.models.load import LoadedModel

MAGIC = b"LSCOPE-KLD-BASE\n"
FORMAT_VERSION = 1


def compare(base: np.ndarray, model: np.ndarray, targets: Sequence[int], start: int, top: int = 5) -> list[TokenKLD]:
    """Rows of two ``[T, V]`` float32 logprob arrays; row ``t`` predicts ``targets[t]``."""
    kld = kl_divergences(base, model)
    best_b = np.argsort(-base, axis=-1, kind="stable")[:, :top]
    best_m = np.argsort(-model, axis=-1, kind="stable")[:, :top]
    rows = []
    for t, token in enumerate(targets):
        rows.append(
            TokenKLD(
                index=start + t,
                token_id=int(token),
                kld=float(kld[t]),
                same_top=bool(np.argmax(base[t]) == np.argmax(model[t])),
                logprob_base=float(base[t, token]),
                logprob_model=float(model[t, token]),
                top_base=tuple((int(i), float(base[t, i])) for i in best_b[t]),
                top_model=tuple((int(i), float(model[t, i])) for i in best_m[t]),
            )
        )
    return rows


def logprob_rows(loaded: LoadedModel, tokens: Sequence[int], chunk: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(a, rows)`` per chunk: the model's raw logprobs ``[b − a, V]`` at positions a..b−1
    of ``tokens`` (each predicting the next token), one KV cache for the whole text (quantized
    as ``loaded.kv`` says)."""
    cache = kv.new_request_cache(loaded.model, loaded.kv)
    for a in range(0, len(tokens) - 1, chunk):
        b = min(a + chunk, len(tokens) - 1)
        rows = raw_logprobs(loaded.model, mx.array(tokens[a:b])[None], cache)
        kv.after_forward(cache, loaded.kv)
        yield a, rows


class BaseFile:
    """The base's logprobs for one token sequence, float32, row by row: a header line
    (magic), a JSON header (format version, vocabulary size, the token ids, what wrote it)
    and ``len(tokens) − 1`` rows of ``vocab`` float32 values. Read back, everything is
    checked against the file's size before any row is used."""

    def __init__(self, path: Path, header: dict, offset: int) -> None:
        self.path, self.header, self._offset = path, header, offset

    @property
    def tokens(self) -> list[int]:
        return list(self.header["tokens"])

    @property
    def vocab(self) -> int:
        return int(self.header["vocab"])

    @staticmethod
    def write(
        path: Path,
        tokens: Sequence[int],
        vocab: int,
        about: dict,
        rows: Iterable[tuple[int, np.ndarray]],
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        header = json.dumps({"version": FORMAT_VERSION, "vocab": vocab, "tokens": list(tokens), **about}).encode()
        tmp = path.with_name(path.name + ".partial")
        with open(tmp, "wb") as f:
            f.write(MAGIC + struct.pack("<Q", len(header)) + header)
            for a, block in rows:
                f.write(np.ascontiguousarray(block, np.float32).tobytes())
                if progress is not None:
                    progress(a + len(block), len(tokens) - 1)
        tmp.replace(path)  # a cancelled pass leaves no half-written base behind

    @classmethod
    def open(cls, path: Path) -> BaseFile:
        try:
            size = path.stat().st_size
            with open(path, "rb") as f:
                head = f.read(len(MAGIC) + 8)
                if len(head) < len(MAGIC) + 8 or not head.startswith(MAGIC):
                    raise EngineError(f"{path} is not a base file written by `kld --save-base`.")
                (n,) = struct.unpack("<Q", head[len(MAGIC) :])
                if n > min(size, 1 << 30):
                    raise EngineError(f"{path}: its header claims {n} bytes; the file is damaged.")
                header = json.loads(f.read(n).decode("utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise EngineError(f"cannot read the base file {path}: {exc}") from exc
        checked = _check_header(path, header)
        offset = len(MAGIC) + 8 + n
        expected = offset + 4 * checked["vocab"] * (len(checked["tokens"]) - 1)
        if size != expected:
            raise EngineError(
                f"{path} holds {size} bytes where its header says {expected}: it is truncated or damaged."
            )
        return cls(path, checked, offset)

    def rows(self, chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        n, v = len(self.tokens) - 1, self.vocab
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            for a in range(0, n, chunk):
                b = min(a + chunk, n)
                block = np.frombuffer(f.read(4 * v * (b - a)), np.float32).reshape(b - a, v)
                yield a, block


def _check_header(path: Path, header: object) -> dict:
    if not isinstance(header, dict) or header.get("version") != FORMAT_VERSION:
        raise EngineError(f"{path}: not a version {FORMAT_VERSION} base file.")
    vocab, tokens = header.get("vocab"), header.get("tokens")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or not 0 < vocab < 1 << 24:
        raise EngineError(f"{path}: a bad vocabulary size {vocab!r}.")
    ok = isinstance(tokens, list) and len(tokens) >= 2
    if not ok or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in tokens):
        raise EngineError(f"{path}: the token ids are missing or out of range.")
    first = header.get("first", 0)
    if not isinstance(first, int) or isinstance(first, bool) or not 0 <= first < len(tokens) - 1:
        raise EngineError(f"{path}: a bad first scored position {first!r}.")
    return header


def pair_rows(
    base: Iterable[tuple[int, np.ndarray]],
    model: Iterable[tuple[int, np.ndarray]],
    tokens: Sequence[int],
    first: int = 0,
    top: int = 5,
) -> Iterator[TokenKLD]:
    """Walk both row streams together (the same chunking); ``first``: the position of the
    first scored token's prediction (the context before it is not scored)."""
    for (a, rb), (a2, rm) in zip(base, model, strict=True):
        if a != a2 or rb.shape != rm.shape:
            raise EngineError("the base and the model rows are out of step (different chunking or vocabulary).")
        keep = max(first - a, 0)
        if keep < len(rb):
            yield from compare(rb[keep:], rm[keep:], tokens[a + keep + 1 : a + len(rb) + 1], a + keep - first, top)


def check_same_tokenization(ids: Sequence[int], theirs: Sequence[int]) -> None:
    """Refuse a model whose tokenizer turns the text into other ids than the base's."""
    if list(theirs) != list(ids):
        at = next((i for i, (x, y) in enumerate(zip(ids, theirs, strict=False)) if x != y), min(len(ids), len(theirs)))
        raise EngineError(
            f"the models tokenize the text differently (from token {at} on): compare models sharing a tokenizer."
        )
