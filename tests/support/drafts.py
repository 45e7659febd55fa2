"""Draft models for the speculative tests, and a scheduler run that collects every request."""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import mlx.nn as nn

from engine.api.events import Finished, TokenStep
from engine.models.load import LoadedModel
from engine.runtime.scheduler import Scheduler


class EndsEarly(nn.Module):
    """A model that "thinks the answer is over": its end-of-sequence logit is raised by
    ``boost`` wherever the input token's id is a multiple of ``every`` — where the model it
    wraps goes on. Its caches are the wrapped model's own."""

    def __init__(self, inner: nn.Module, eos: int, every: int = 3, boost: float = 60.0) -> None:
        super().__init__()
        self.inner, self.eos, self.every, self.boost = inner, eos, every, boost
        self.layers = inner.layers  # make_prompt_cache: one KVCache a layer

    def __call__(self, inputs: mx.array, cache=None) -> mx.array:
        logits = self.inner(inputs, cache=cache)
        raised = mx.where(inputs % self.every == 0, self.boost, 0.0)[..., None]
        return logits + raised * (mx.arange(logits.shape[-1]) == self.eos)


def ending_early(loaded: LoadedModel, every: int = 3, boost: float = 60.0) -> LoadedModel:
    """``loaded`` with :class:`EndsEarly` around its model (its first end-of-sequence token)."""
    return dataclasses.replace(loaded, model=EndsEarly(loaded.model, min(loaded.eos_token_ids), every, boost))


def run_requests(model: LoadedModel, requests, draft=None, tokens=3, change=None, prefill_chunk=512):
    """Every request's steps and Finished; ``change`` = (index, params): a live change once
    the first request has that many tokens (at a step boundary), and the index it applied at."""
    scheduler = Scheduler(model, prefill_chunk=prefill_chunk)
    if draft is not None:
        scheduler.set_draft(draft, tokens)
    ids = [scheduler.insert(model.tokenizer.encode(prompt), params) for prompt, params in requests]
    steps: dict[int, list[TokenStep]] = {i: [] for i in ids}
    done: dict[int, Finished] = {}
    changed_at = None
    while scheduler.has_work():
        for event in scheduler.step():
            if isinstance(event, TokenStep):
                steps[event.request_id].append(event)
            elif isinstance(event, Finished):
                done[event.request_id] = event
        if change is not None and changed_at is None and len(steps[ids[0]]) >= change[0] and ids[0] not in done:
            changed_at = len(steps[ids[0]])
            scheduler.update_params(ids[0], change[1])
    return [steps[i] for i in ids], [done[i] for i in ids], changed_at


def token_ids(steps) -> list[int]:
    return [s.token_id for s in steps]
