"""``penalties``: repetition (CTRL), then OpenAI presence and frequency, over the window."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import mlx.core as mx
import numpy as np

from engine.api.params import SamplingParams
from engine.specs.penalties import SPEC
from engine.stages.base import Accepted, Inputs, Rows, Stage, StateContext, device_constant
from engine.stages.penalty_counts import NO_TOKEN, PenaltyCounts, TokenPositions, next_counts


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
    """The rows' token counts over their penalty windows: each row's :class:`TokenPositions`
    on the host (the inspection's candidate counts, whatever the chain), and the [B, V]
    int32 counts on the device only while a step's chain reads them. Made from the host
    when a chain first needs them, they are dropped at the first token no chain read them
    for, so a step without penalties neither gathers nor scatters counts.

    A step over the whole batch computes the counts after its tokens itself
    (:func:`next_counts`, the stage's ``update``) and hands them over (``updated``): its
    ``advance`` or ``accept`` takes them; the other steps' are scattered in."""

    def __init__(self, vocab: int, windows: Sequence[int], positions: list[TokenPositions]) -> None:
        self.vocab = vocab
        self.windows = list(windows)
        self.positions = positions
        self.device: PenaltyCounts | None = None
        self.stepped: mx.array | None = None  # the counts after the last step's tokens (``updated``)
        self._read = False  # a chain read the device counts since they last took a token
        self._advanced = False

    def extend(self, other: CountRows) -> None:
        if self.device is not None and other.device is not None:
            self.device.extend(other.device)
        else:
            self.device = None
        self.stepped = None
        self.windows += other.windows
        self.positions += other.positions

    def filter(self, keep: Sequence[int]) -> None:
        if self.device is not None:
            self.device.filter(keep)
        if self.stepped is not None:
            self.stepped = self.stepped[mx.array(list(keep), dtype=mx.int32)]
        self.windows = [self.windows[i] for i in keep]
        self.positions = [self.positions[i] for i in keep]

    def set_params(self, row: int, old: SamplingParams, new: SamplingParams, history: Sequence[int]) -> None:
        # A new window is recounted (made afresh when next read); otherwise the counts carry on.
        self.windows[row] = new.penalty_window
        if new.penalty_window != old.penalty_window:
            self.device = self.stepped = None

    def accept(self, params: Sequence[SamplingParams], accepted: Sequence[Accepted]) -> None:
        """O(1) per row (llama.cpp's ring buffer): +1 for the new token, -1 for the one leaving."""
        for positions, a in zip(self.positions, accepted, strict=True):
            positions.append(a.token)
        if self._advanced:  # counted on the device already (``advance``); ``stepped`` is the next step's
            self._advanced = False
            self._read = False
            return
        if self.device is not None and not self._read and not any(SPEC.active(p) for p in params):
            # No chain read them for this token and no row uses them: made afresh when one
            # does. A row that uses them keeps them counted through tokens no step read for
            # (a draft's kept tokens, taken one after another), at O(1) each.
            self.device = None
        elif self.stepped is not None:
            self.device = PenaltyCounts(self.stepped)
        elif self.device is not None:
            self.device.accept([a.token for a in accepted], [a.leaving for a in accepted])
        self.stepped = None
        self._read = False

    advances = True

    def advance(self, tokens: mx.array, leaving: Sequence[int | None]) -> None:
        # Called only when a chain reads the counts (``SamplingBatch.sample_ahead``), for the
        # tokens of the step sampled last: the counts it computed after them, if it did.
        if self.stepped is not None:
            self.device, self.stepped = PenaltyCounts(self.stepped), None
        else:
            self._on_device().accept(tokens, leaving)
        self._advanced = True

    def inputs(self, params: Sequence[SamplingParams], rows: Rows, indices: Sequence[int]) -> dict[str, mx.array]:
        self._read = True
        self.stepped = None  # a new step: what the last one computed was taken, or is void
        return {"counts": rows.take(self._on_device().counts)}

    def update_inputs(self) -> dict[str, mx.array]:
        """Each row's token leaving its window as the step's token arrives ([B, 1] int32),
        after the token ``advance`` took on the device when it did."""
        ahead = int(self._advanced)
        leaving = [p.leaving(w, ahead) for p, w in zip(self.positions, self.windows, strict=True)]
        if all(token == NO_TOKEN for token in leaving):
            return {"leaving": _none_leaving(len(leaving))}
        return {"leaving": mx.array(np.array(leaving, dtype=np.int32).reshape(-1, 1))}

    def updated(self, new: Mapping[str, mx.array]) -> None:
        self.stepped = new["counts"]

    def ahead_held(self) -> bool:
        return True  # integer counts: the host's and the device's are the same

    def _on_device(self) -> PenaltyCounts:
        if self.device is None:
            made = [p.counts(w, self.vocab) for p, w in zip(self.positions, self.windows, strict=True)]
            self.device = PenaltyCounts.of_rows(made, self.vocab)
        return self.device

    def counter(self, row: int, end: int | None = None) -> Callable[[int], int]:
        """A token's count in row ``row``'s window (over its history's first ``end``)."""
        positions, window = self.positions[row], self.windows[row]
        return lambda token: positions.count(token, window, end)

    def carry(self, row: int) -> Any:
        return None

    def mark(self) -> Any:
        # The device counts are an immutable array: keeping the reference keeps them.
        device = None if self.device is None else self.device.counts
        return [len(p) for p in self.positions], device, self.stepped, self._read, self._advanced

    def rewind(self, mark: Any) -> None:
        lengths, device, self.stepped, self._read, self._advanced = mark
        for positions, length in zip(self.positions, lengths, strict=True):
            positions.truncate(length)
        self.device = None if device is None else PenaltyCounts(device)


_none_leaving = device_constant(lambda batch: mx.full((batch, 1), NO_TOKEN, dtype=mx.int32))


def _update(inputs: Inputs, tokens: mx.array, logprob_at: Callable[[str], mx.array]) -> dict[str, mx.array]:
    return {"counts": next_counts(inputs["counts"], tokens, inputs["leaving"])}


def _state(ctx: StateContext, params: Sequence[SamplingParams], histories, carries) -> CountRows:
    return CountRows(ctx.vocab, [p.penalty_window for p in params], [TokenPositions(h) for h in histories])


STAGE = Stage(SPEC, _apply, _columns, state=_state, update=_update)
