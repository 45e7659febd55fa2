"""One compiled decode step per chain shape: the stages, the draw and the inspection pack.

mlx-lm's step after the model is a handful of kernels; ours also inspects every stage.
Compiling the chain and the pack as one function lets MLX fuse the element-wise work
of both (a GPU step costs its kernel count, not its arithmetic), and every parameter
is an array input, so a new value never recompiles.
"""

from __future__ import annotations

from functools import partial

import mlx.core as mx

from engine.sampling.inspection import PackLayout, drawn_logprob, pack_outputs
from engine.sampling.sampler import apply_chain, compiled_once
from engine.stages import STAGES


def compiled_step(
    chain: tuple[str, ...],
    aliases: frozenset[str],
    use_noise: bool,
    forms: tuple[str | None, ...],
    layout: PackLayout,
    with_forced: bool = False,
    updates: tuple[str, ...] = (),
    any_greedy: bool = True,
    derive: bool = True,
):
    """The chain, the draw, the inspection pack and the state's update as one compiled
    function ``(raw [B, V], inputs, noise, forced [B]) -> (tokens [B], packed [B, W],
    final [B, V], updated)``, one per chain shape: element-wise work fuses across the stages
    and the pack, and a new value never recompiles. ``layout``: the group's
    (``engine.sampling.inspection.chain_layout``); ``forced`` (with ``with_forced``; -1:
    draw) overrides the drawn token; ``updated``: each stage of ``updates``' state after the
    tokens (``Stage.update``: state in, new state out); ``any_greedy``: some row draws
    greedily (``engine.sampling.sampler.apply_chain``); ``derive``: the pack may derive the
    bias's statistics from raw's (``engine.sampling.inspection.pack_outputs``)."""

    def make():
        def step(raw, inputs, noise, forced):
            outputs, tokens = apply_chain(chain, aliases, use_noise, forms, raw, inputs, noise, any_greedy)
            if with_forced:
                tokens = mx.where(forced >= 0, forced, tokens)
            packed = pack_outputs(layout, outputs, tokens, inputs, derive)
            logprob_at = partial(drawn_logprob, layout, packed)
            updated = {name: STAGES[name].update(inputs, tokens, logprob_at) for name in updates}
            return tokens, packed, outputs[-1], updated

        return step

    key = ("step", chain, aliases, use_noise, forms, layout, with_forced, updates, any_greedy, derive)
    return compiled_once(key, make)
