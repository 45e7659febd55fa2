"""``penalties``: repetition (CTRL), then OpenAI presence and frequency, over the window."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlx.core as mx

from engine.api.params import SamplingParams
from engine.specs.penalties import SPEC
from engine.stages.base import Accepted, Inputs, Rows, Stage, StateContext
from engine.stages.penalty_counts import PenaltyCounts, count_tokens


def apply_penalties(
    logits: mx.array,
    counts: mx.array,
    repetition: mx.array,
    presence: mx.array,
    frequency: mx.array,
) -> mx.array:
    """Repetition (Keskar et al. 2019) divides positive and multiplies negative logits of
    seen tokens; presence subtracts ``p`` once, frequency ``f * count`` (llama.cpp's
    ``penalties`` sampler, Hugging Face's RepetitionPenaltyLogitsProcessor).

    logits: [B, V] float32; counts: [B, V] int32 (tokens in the window);
    repetition, presence, frequency: [B, 1] float32 (1, 0, 0 = off).
    """
    seen = counts > 0
    scaled = mx.where(logits > 0, logits / repetition, logits * repetition)
    logits = mx.where(seen, scaled, logits)
    return logits - presence * seen.astype(mx.float32) - frequency * counts.astype(mx.float32)


# A repetition penalty below float32's range would divide positive logits by 0 (inf):
# held at this floor it is already the limit, seen tokens pushed to the extremes.
MIN_REPETITION_PENALTY = 1e-6


def _columns(p: SamplingParams) -> dict[str, float]:
    return {
        "repetition_penalty": max(p.repetition_penalty, MIN_REPETITION_PENALTY),
        "presence_penalty": p.presence_penalty,
        "frequency_penalty": p.frequency_penalty,
    }


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_penalties(
        logits,
        inputs["counts"],
        inputs["repetition_penalty"],
        inputs["presence_penalty"],
        inputs["frequency_penalty"],
    )


class CountRows:
    """The rows' token counts over their penalty windows ([B, V] int32 on the device)."""

    def __init__(self, vocab: int, counts: PenaltyCounts) -> None:
        self.vocab = vocab
        self.counts = counts
        self._advanced = False

    def extend(self, other: CountRows) -> None:
        self.counts.extend(other.counts)

    def filter(self, keep: Sequence[int]) -> None:
        self.counts.filter(keep)

    def set_params(self, row: int, old: SamplingParams, new: SamplingParams, history: Sequence[int]) -> None:
        # A new window is recounted; otherwise the counts carry on.
        if new.penalty_window != old.penalty_window:
            self.counts.counts[row] = mx.array(count_tokens(history, new.penalty_window, self.vocab))

    def accept(self, params: Sequence[SamplingParams], accepted: Sequence[Accepted]) -> None:
        """O(1) per row (llama.cpp's ring buffer): +1 for the new token, -1 for the one leaving."""
        if self._advanced:  # counted on the device already (``advance``)
            self._advanced = False
            return
        self.counts.accept([a.token for a in accepted], [a.leaving for a in accepted])

    advances = True

    def advance(self, tokens: mx.array, leaving: Sequence[int | None]) -> None:
        self.counts.accept(tokens, leaving)
        self._advanced = True

    def inputs(self, params: Sequence[SamplingParams], rows: Rows, indices: Sequence[int]) -> dict[str, mx.array]:
        return {"counts": rows.take(self.counts.counts)}

    def carry(self, row: int) -> Any:
        return None


def _state(ctx: StateContext, params: Sequence[SamplingParams], histories, carries) -> CountRows:
    windows = [p.penalty_window for p in params]
    return CountRows(ctx.vocab, PenaltyCounts.from_histories(histories, windows, ctx.vocab))


# ``counts`` also feeds every candidate's ``count`` in the inspection, in the chain or not.
STAGE = Stage(SPEC, _apply, _columns, state=_state, reported=("counts",))
