"""transformers' float32 numbers for the real models, computed once and kept.

transformers dequantizes a GGUF file and runs its own implementation of the architecture
(``tests/support/real_models.py``); on this CPU that is minutes of the suite for numbers that
change only with the file. ``python -m tests.data.make_transformers_references`` computes them
and writes ``tests/data/references-<model>.npz``; a test reads them back through
:func:`reference`, which fails unless the model file installed here is the one they were made
from (its SHA-256) and the token ids the test asks about are the ones they were made for.

Each distribution is kept as its ``TOP`` most likely tokens, sorted (ties by token id, as a
stable argsort gives them): the checks read the reference's top 5, its argmax and the value
at a token the engine chose; a token the engine ranks high that is not among the reference's
top ``TOP`` fails the check that asks for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.support.paths import DATA

TOP = 40
"""Tokens kept per distribution."""
REGENERATE = "python -m tests.data.make_transformers_references"


@dataclass(frozen=True)
class TopRows:
    """Distributions kept as their top tokens: ``ids[t]`` and ``values[t]``, best first."""

    ids: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def top(self, t: int, k: int) -> list[tuple[int, float]]:
        return [(int(i), float(v)) for i, v in zip(self.ids[t, :k], self.values[t, :k], strict=True)]

    def argmax(self, t: int) -> int:
        return int(self.ids[t, 0])

    def max(self, t: int) -> float:
        return float(self.values[t, 0])

    def value(self, t: int, token: int) -> float | None:
        """The logprob of ``token`` at row ``t``; None: not among the kept tokens."""
        where = np.flatnonzero(self.ids[t] == token)
        return float(self.values[t, where[0]]) if len(where) else None


def top_rows(logprobs: np.ndarray, top: int = TOP) -> TopRows:
    """``[N, V]`` log-probabilities kept as their ``top`` best tokens a row."""
    order = np.argsort(-logprobs, axis=-1, kind="stable")[:, :top]
    return TopRows(order.astype(np.int32), np.take_along_axis(logprobs, order, axis=-1).astype(np.float32))


@dataclass(frozen=True)
class Greedy:
    """transformers' own greedy path from a prompt: its tokens and, for each, the
    distribution it was the argmax of."""

    tokens: list[int]
    rows: TopRows


class Reference:
    """The kept numbers of one model file."""

    def __init__(self, arrays: dict[str, np.ndarray], meta: dict) -> None:
        self.arrays, self.meta = arrays, meta

    def _ids(self, name: str, ids: list[int]) -> None:
        kept = self.arrays[f"{name}.input"].tolist()
        assert kept == list(ids), f"the reference {name!r} was made for other token ids; regenerate: {REGENERATE}"

    def _rows(self, key: str) -> TopRows:
        return TopRows(self.arrays[f"{key}.ids"], self.arrays[f"{key}.values"])

    def logprobs(self, name: str, ids: list[int]) -> TopRows:
        """transformers' log-softmax at the kept positions of ``ids`` (as made: every one
        but the last, or those ``meta["positions"][name]`` names)."""
        self._ids(name, ids)
        return self._rows(name)

    def positions(self, name: str) -> list[int]:
        return self.meta["positions"][name]

    def greedy(self, name: str, prompt: list[int]) -> Greedy:
        self._ids(name, prompt)
        return Greedy(self.arrays[f"{name}.tokens"].tolist(), self._rows(name))

    def lens(self, name: str, ids: list[int]) -> list[TopRows]:
        """Per layer (0: the embeddings' output), transformers' hooked lens at every position."""
        self._ids(name, ids)
        return [self._rows(f"{name}.{layer}") for layer in range(self.meta["layers"][name])]


def reference(model: str, model_file: Path) -> Reference:
    """The kept numbers of ``model`` (``gemma3``, ``smollm2``), checked against ``model_file``."""
    from engine.models.load import file_hash

    path = DATA / f"references-{model}.npz"
    with np.load(path) as stored:
        arrays = {k: stored[k] for k in stored.files}
    meta = json.loads(str(arrays.pop("meta")))
    digest = file_hash(Path(model_file))
    assert digest == meta["sha256"], (
        f"{path.name} was made from {meta['file']} with SHA-256 {meta['sha256'][:16]}…, "
        f"not from {Path(model_file).name} ({digest[:16]}…); regenerate: {REGENERATE}"
    )
    return Reference(arrays, meta)
