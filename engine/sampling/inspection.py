"""Per-step inspection data for every stage of the chain, in one host transfer.

Each distinct distribution the chain made (the stages that ran; a stage that was the
identity for every row is its input again) gets its max, its sums Z = Σ exp(x - max) and
Σ exp(x - max)·(x - max), and its surviving tokens, reduced once over all of them stacked;
every candidate's logit is gathered once from the stack. A group's rows are packed as
:class:`PackLayout` says (only the stages that ran), groups are laid one after another in
one flat float32 array, and a step costs exactly one copy to the host, where log Z, the
entropies and the logprobs are finished in float32 (a few values a row: two kernels fewer
on the device, each a launch on a GPU).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, partial

import mlx.core as mx

from engine.sampling.sampler import ChainResult, compiled_once, output_sources
from engine.stages import STAGES
from engine.stages.base import cpu_forms, device_constant, exp

BLOCK = 128
"""Top candidates are found among the ``top_n`` blocks of this many tokens with the
largest maxima (every top-n token lies in one of them), so a step partitions a few
thousand values instead of the vocabulary: four times cheaper on the CPU."""
STATS = ("max", "z", "weighted", "survivors")
"""What a packed row holds per distribution (:class:`PackLayout`)."""


@dataclass(frozen=True)
class PackLayout:
    """Where a group's values sit in each of its packed rows (host and device agree on it).

    The distinct distributions of the chain (a stage that was the identity for every row
    repeats its input: one distribution) are stacked raw first, the last stage's second,
    then the others in chain order. A row is ``[stats [4, D], index [S], logits [D, S]]``:
    each distribution's max, Z = Σ e with e = exp(x - max), Σ e·(x - max) and surviving
    tokens; the candidates' ids (``S = 2 * top_n + 1`` slots: the top of ``raw``, the top
    of the last stage, the drawn token, which is how the host knows the token), and their
    logit in every distribution. On the host, in float32: log Z = log(Z), the entropy
    ``max(log Z - Σ/Z, 0)`` and a logprob ``(logit - max) - log Z``, which hold for any
    shift in place of the max with Z over it: on a CPU the bias's distribution holds raw's
    max plus the row's largest bias there (``_bias_derived``). The ids are int32 bits
    in the float32 row (``mx.view``: a cast would be a kernel; the host reads them back with
    ``.view(np.int32)``). The candidates' penalty counts are the host's
    (``engine.stages.penalty_counts.TokenPositions``): a gather and a scatter fewer a step.
    """

    chain: tuple[str, ...]
    """The group's stages (without ``raw``)."""
    sources: tuple[int, ...]
    """For each output (``raw``, then each stage), the first output with the same values."""
    top_n: int
    extras: tuple[str, ...] = ()
    """The stages that ran whose ``Stage.statistics`` close each row, in chain order."""

    @cached_property  # read for every row of every step
    def order(self) -> tuple[int, ...]:
        """The distinct outputs in stack order."""
        distinct = sorted(set(self.sources))
        last = self.sources[-1]
        return (0, *([last] if last else []), *(i for i in distinct if i not in (0, last)))

    @cached_property
    def bias_lane(self) -> int | None:
        """The stack index of the bias's distribution, where the bias ran (None: it did not,
        or it was the identity for every row)."""
        if "bias" not in self.chain:
            return None
        source = self.sources[self.chain.index("bias") + 1]
        return self.order.index(source) if source else None

    @cached_property
    def bias_z(self) -> int | None:
        """Where the bias's distribution's Z sits in a packed row (None: no such distribution)."""
        return None if self.bias_lane is None else len(self.order) + self.bias_lane

    @property
    def slots(self) -> int:
        return slots(self.top_n)

    @cached_property
    def width(self) -> int:
        d, s = len(self.order), self.slots
        return len(STATS) * d + s + d * s + sum(STAGES[n].statistics_width for n in self.extras)

    def extras_at(self, stage: str) -> int:
        """Where ``stage``'s figures start in a packed row."""
        at = self.width
        for name in reversed(self.extras):
            at -= STAGES[name].statistics_width
            if name == stage:
                return at
        raise KeyError(stage)

    def distribution(self, stage: str) -> int:
        """The stack index of the distribution after ``stage`` (``raw`` too)."""
        output = 0 if stage == "raw" else self.chain.index(stage) + 1
        return self.order.index(self.sources[output])

    def effect_pair(self, stage: str) -> tuple[int, int] | None:
        """The distributions before and after ``stage``, or None when it did not run."""
        if stage not in self.chain:
            return None
        i = self.chain.index(stage)
        before = "raw" if i == 0 else self.chain[i - 1]
        return self.distribution(before), self.distribution(stage)


def slots(top_n: int) -> int:
    return 2 * top_n + 1 if top_n > 0 else 1


def layout_of(result: ChainResult, top_n: int) -> PackLayout:
    return chain_layout(result.chain, result.aliases, top_n)


def chain_layout(chain: tuple[str, ...], aliases: frozenset[str], top_n: int) -> PackLayout:
    """The layout of a group whose chain is ``chain`` with the stages ``aliases`` the identity."""
    return PackLayout(chain, tuple(output_sources(chain, aliases)), top_n, extras_of(chain, aliases))


def extras_of(chain: Sequence[str], aliases: frozenset[str]) -> tuple[str, ...]:
    """The stages of ``chain`` that ran and pack figures of their own (``Stage.statistics``)."""
    return tuple(n for n in chain if n not in aliases and STAGES[n].statistics is not None)


def _blocks(values: mx.array) -> mx.array:
    """[R, V] -> [R, V / BLOCK, BLOCK]; [R, 1, V] when V is not a multiple of ``BLOCK``."""
    vocab = values.shape[-1]
    return values.reshape(values.shape[0], -1, BLOCK if vocab % BLOCK == 0 else vocab)


def _sum(values: mx.array) -> mx.array:
    """[R, n, b] -> [R, 1, 1]. MLX's CPU backend sums a row in one pass, adding a tail of
    tiny probabilities to the top token's 1.0 one by one, and those under half its ulp are
    lost (1.2e-4 nats of log Z on a peaked 49,152-token step): there, by blocks of
    ``BLOCK`` first, then the blocks. A GPU's reduction is a tree already, and a second one
    would cost a launch."""
    if cpu_forms():
        return mx.sum(mx.sum(values, axis=-1, keepdims=True), axis=-2, keepdims=True)
    return mx.sum(values, axis=(-2, -1), keepdims=True)


def _largest(values: mx.array, n: int, axis: int = -1) -> mx.array:
    """The indices (uint32) of the ``n`` largest of ``values`` along ``axis``, in no order."""
    size = values.shape[axis]
    part = mx.argpartition(values, kth=size - n, axis=axis)
    return part[..., size - n :] if axis == -1 else part[..., size - n :, :]


def _top_indices(blocks: mx.array, block_max: mx.array, n: int) -> mx.array:
    """[R, nb, b] values by blocks and their maxima [R, nb, 1] -> [R, n] uint32: the ids of
    the ``n`` largest, in no order.

    The top ``n`` values of a row lie in the ``n`` blocks with the largest maxima (a value
    outside them is beaten or tied by those ``n`` maxima), so a partition over the block
    maxima, then over the values of those blocks, finds them.
    """
    rows, count, size = blocks.shape
    n = min(n, count * size)
    if n >= count:
        return _largest(blocks.reshape(rows, count * size), n)
    best = _largest(block_max, n, axis=-2)  # [R, n, 1]
    inside = mx.take_along_axis(blocks, best, axis=-2).reshape(rows, n * size)
    ids = (best * size + _offsets()).reshape(rows, n * size)  # the ids of ``inside``
    return mx.take_along_axis(ids, _largest(inside, n), axis=-1)


_offsets = device_constant(lambda: mx.arange(BLOCK, dtype=mx.uint32))
_lanes = device_constant(lambda n: mx.arange(n, dtype=mx.int32)[:, None, None])
_stacked = device_constant(lambda n: mx.arange(n, dtype=mx.int32)[None, :, None])
"""[1, n, 1]: each row's n distributions, as lanes."""
_lane_is = device_constant(lambda n, k: (mx.arange(n) == k).reshape(1, n, 1, 1))
"""[1, n, 1, 1]: whether each of a row's n distributions is the ``k``-th."""
_first = device_constant(lambda count, size: mx.arange(count * size).reshape(count, size) == 0)


def pack_outputs(
    layout: PackLayout,
    outputs: Sequence[mx.array],
    tokens: mx.array,
    inputs: Mapping[str, mx.array],
    derive: bool = True,
) -> mx.array:
    """[B, layout.width] float32: the inspection data of one group (pure; compiled with the
    chain by ``engine.sampling.step.compiled_step``, or alone by :func:`pack_step`).

    The statistics of every distribution are reduced once over the stacked distributions
    (one max by blocks, one exp, three sums; ``derive``: on a CPU, the bias's without an
    exp of its own, :func:`_bias_derived`), and every candidate's logit is gathered once
    from the stack: a handful of kernels however long the chain, which is what a step
    costs on a GPU. A row's distributions are stacked one after another ([B·D, V]) and
    reduced with their dimensions kept, so the values fall in the pack's order by
    reshapes: a transpose or a squeeze launches nothing, but it is a node of the graph
    too, evaluated at every step (the greedy step with the EOS ban: 45 nodes outside the
    model on a CPU, 55 with the stack [D, B, V] and its transposes).
    """
    batch, d, vocab = tokens.shape[0], len(layout.order), outputs[0].shape[-1]
    if d == 1:
        stack = outputs[layout.order[0]]
    elif cpu_forms():
        stack = mx.stack([outputs[i] for i in layout.order], axis=1).reshape(batch * d, vocab)
    else:
        # On a GPU a stack is a copy kernel per distribution (MLX's concatenation): here one
        # element-wise kernel that selects each lane's distribution (a CPU would compute
        # every select for every lane).
        lane, stack = _stacked(d), outputs[layout.order[-1]][:, None]
        for k in range(d - 2, -1, -1):
            stack = mx.where(lane == k, outputs[layout.order[k]][:, None], stack)
        stack = stack.reshape(batch * d, vocab)
    blocks = _blocks(stack)  # [B·D, nb, b]
    block_max = mx.max(blocks, axis=-1, keepdims=True)  # [B·D, nb, 1]
    top = mx.max(block_max, axis=-2, keepdims=True)  # [B·D, 1, 1]
    lane = derived_lane(layout, inputs) if derive else None
    if lane is None:
        e, shift = exp(blocks - top), top
    else:
        e, shift = _bias_derived(blocks, top, lane, d, inputs)
    if cpu_forms():
        # Three sums: on a CPU a kernel costs its arithmetic, and the lanes below would
        # compute every branch for every lane (a third slower for two distributions of
        # 49,152 when measured; the same values). (blocks + (-top) is blocks - top to the bit, written
        # apart so that MLX's compile does not keep the shifted values as a kernel of their
        # own for the exp and this to read.)
        weighted = mx.where(e > 0, e * (blocks + -top), 0.0)
        survived = mx.where(blocks > float("-inf"), 1.0, 0.0)  # float32: no cast to pack
        survivors = mx.sum(survived, axis=(-2, -1), keepdims=True)
        z, weighted = _sum(e), _sum(weighted)
        if lane is not None:
            # Σ e·(x - shift) for the shift the derived e is over, from the sum over each
            # distribution's own max: summed over the shift, each term would carry the
            # shift's distance from the max (up to some 60 nats), and the sum's rounding
            # with it into the entropy (9e-4 nats seen); this way it is one rounding.
            weighted = weighted - (shift - top) * z
        stats = mx.concatenate([shift, z, weighted, survivors], axis=-1)  # [B·D, 1, 4]
    else:
        # On a GPU a kernel costs its launch: Z, Σ e·(x - max), the survivors and the max
        # as four lanes of one array summed by one reduction (one element-wise kernel and
        # one sum, where three kernels and three sums were), the max a lane that holds it
        # at the first position and zeros elsewhere (its sum is it exactly), so that it is
        # no piece of its own for the concatenation to copy. ``e`` stays a kernel of its
        # own (MLX does not fuse across the lanes' broadcast): each exp is computed once.
        e_, x, top_ = e[:, None], blocks[:, None], top[:, None]
        lanes = [
            mx.where(_first(*blocks.shape[1:]), top_, 0.0),
            e_,
            mx.where(e_ > 0, e_ * (x + -top_), 0.0),
            mx.where(x > float("-inf"), 1.0, 0.0),
        ]
        lane, selected = _lanes(len(lanes)), lanes[-1]
        for i in range(len(lanes) - 2, -1, -1):
            selected = mx.where(lane == i, lanes[i], selected)
        stats = _sum(selected)  # [B·D, 4, 1, 1]
    if d == 1:
        stats = stats.reshape(batch, len(STATS))
    else:  # [4, D] in each row
        stats = stats.reshape(batch, d, len(STATS)).transpose(0, 2, 1).reshape(batch, -1)
    chosen = mx.view(tokens, mx.uint32)[:, None]  # the draw's ids, as the candidates' are
    if layout.top_n > 0:
        # The top of raw and of the last distribution (raw's again when nothing changed it).
        firsts = [blocks, block_max]
        if d > 2:
            firsts = [v.reshape(batch, d, *v.shape[1:])[:, :2].reshape(batch * 2, *v.shape[1:]) for v in firsts]
        tops = _top_indices(*firsts, layout.top_n).reshape(batch, -1)
        index = mx.concatenate([tops, tops, chosen] if d == 1 else [tops, chosen], axis=1)
    else:
        index = chosen
    if d == 1:
        logits = mx.take_along_axis(stack, index, axis=-1)
    else:
        spread = mx.broadcast_to(index[:, None], (batch, d, index.shape[-1])).reshape(batch * d, -1)
        logits = mx.take_along_axis(stack, spread, axis=-1).reshape(batch, -1)  # [D, S] in each row
    extras = []
    for name in layout.extras:
        i = layout.chain.index(name)  # outputs[i] entered it
        extras.append(STAGES[name].statistics(outputs[i], outputs[0], inputs))
    # max, Z, Σ e·(x - max), survivors: [B, 4 * D]; the ids; each distribution's logits
    return mx.concatenate([stats, mx.view(index, mx.float32), logits, *extras], axis=1)


def derived_lane(layout: PackLayout, inputs: Mapping[str, mx.array]) -> int | None:
    """The stack index of the distribution a pack of ``layout`` derives from raw's
    (:func:`_bias_derived`): the bias's, on a CPU, where ``inputs`` hold its factor
    (``engine.stages.bias``); None: every distribution takes its own exp."""
    return layout.bias_lane if cpu_forms() and "bias_factor" in inputs else None


def _bias_derived(
    blocks: mx.array, top: mx.array, lane: int, d: int, inputs: Mapping[str, mx.array]
) -> tuple[mx.array, mx.array]:
    """``e`` and the shifts [B·D, 1, 1] of the stacked distributions, the bias's (stack
    index ``lane``) without an exp of its own (on a CPU the exps are most of the pack: 250
    µs for a row of 49,152). Its e is raw's times ``bias_factor`` = exp(bias - bias_top)
    (``engine.stages.bias``): exp(x + bias - s) with the shift s = raw's max + bias_top in
    place of its own max. Every sum and logprob the host finishes reads a shift and the Z
    over it, whichever the shift (``pack_outputs`` sums Σ e·(x - max) over the own max and
    moves it to the shift in one rounding, where a sum over the shift would carry its
    distance into the entropy), so nothing else changes; but a term under float32's range
    (87 nats under s) is lost, and where the biased distribution's best lies far under s
    (the bias lowered raw's best tokens by some 50 nats more than the rest) its Z is too
    small to trust: ``engine.sampling.unpack.untrusted`` finds those rows and the step is
    packed again whole."""
    rows, count, size = blocks.shape
    batch = rows // d
    by_row, shift = blocks.reshape(batch, d, count, size), top.reshape(batch, d, 1, 1)
    below = exp(by_row[:, :lane] - shift[:, :lane])  # raw's first: the bias enters raw
    e = [below, below[:, :1] * inputs["bias_factor"].reshape(batch, 1, count, size)]
    if lane + 1 < d:
        e.append(exp(by_row[:, lane + 1 :] - shift[:, lane + 1 :]))
    shift = mx.where(_lane_is(d, lane), shift[:, :1] + inputs["bias_top"].reshape(batch, 1, 1, 1), shift)
    return mx.concatenate(e, axis=1).reshape(rows, count, size), shift.reshape(rows, 1, 1)


UNTRUSTED_Z = 1e-22
"""A derived Z under this (about e^-50) may have lost terms that count (:func:`_bias_derived`):
with it at least this, every lost term is under e^-37 of the distribution's best, and at
most V of them change log Z by under 1e-5 nats for a vocabulary of 262,144."""


def drawn_logprob(layout: PackLayout, packed: mx.array, stage: str) -> mx.array:
    """[B, 1]: the drawn token's logprob after ``stage``, read from a group's ``packed`` rows
    [B, width] with the host's arithmetic (``engine.sampling.unpack``: ``(logit - max) -
    log Z`` in float32), so that state the device computes from it is the host's to the bit
    but where the two ``log``s round Z apart (about 3 % of values on MLX's CPU backend)."""
    d, s = len(layout.order), layout.slots
    k = layout.distribution(stage)
    at = len(STATS) * d + s + k * s + s - 1  # the drawn token's slot is the last
    top, z, logit = packed[:, k : k + 1], packed[:, d + k : d + k + 1], packed[:, at : at + 1]
    return (logit - top) - mx.log(z)


def pack_step(
    result: ChainResult, top_n: int, inputs: Mapping[str, mx.array] | None = None, derive: bool = True
) -> mx.array:
    """[B, width] float32 inspection data of a chain's result (see :class:`PackLayout`),
    compiled once per layout; ``inputs``: the step's, for stages that pack figures of their
    own; ``derive``: as :func:`pack_outputs` takes it."""
    layout = layout_of(result, top_n)
    fn = compiled_once(("pack", layout, derive), lambda: partial(pack_outputs, layout, derive=derive))
    return fn(result.outputs, result.tokens, dict(inputs or {}))
