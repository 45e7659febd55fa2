"""The named stage chain over a whole batch, compiled once per chain, and the draw.

``run_chain(logits, chain, inputs, noise)`` runs ``bias`` (when set), then the stages
of ``chain`` in order (llama.cpp's ``llama_sampler_chain_apply``), keeps the logits
after every stage for the inspector, and draws. Every parameter is an array input,
so a new value never recompiles; a compile is made per distinct chain (a tuple of
stage names) and kept in a bounded cache.

Greedy rows (temperature 0) take the argmax of the distribution *entering*
``temperature`` (the stage whose spec ``marks_greedy``); the stage itself divides
their logits by 1, so the stages after it
stay informative. Other rows draw by Gumbel-max from the last stage's logits, with
noise from their own seeded key.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import mlx.core as mx
import numpy as np

from engine.api.params import SamplingParams
from engine.specs import row_chain
from engine.specs.registry import chain_order
from engine.stages import STAGES
from engine.stages.base import cpu_forms
from engine.stages.rng import splitmix64
from engine.stages.xtc import xtc_coin as xtc_coin  # re-exported: one home for the per-request streams

MAX_COMPILED_CHAINS = 64
TRACES = {"count": 0}
"""How many times a chain was traced; tests read it to prove that new parameter values
never recompile."""

_COMPILED: OrderedDict[tuple, object] = OrderedDict()


@dataclass
class ChainResult:
    """The logits after each stage ([B, V] float32; ``outputs[0]`` is ``raw``) and the tokens [B]."""

    chain: tuple[str, ...]
    outputs: list[mx.array]
    tokens: mx.array
    aliases: frozenset[str] = frozenset()
    """Stages that were the identity for every row: their output is their input."""

    def sources(self) -> list[int]:
        """For each output, the index of the first output holding the same values."""
        return output_sources(self.chain, self.aliases)

    def output(self, stage: str) -> mx.array | None:
        if stage == "raw":
            return self.outputs[0]
        return self.outputs[self.chain.index(stage) + 1] if stage in self.chain else None


def output_sources(chain: Sequence[str], aliases: frozenset[str]) -> list[int]:
    """For each output of ``chain`` (``raw``, then each stage), the index of the first
    output holding the same values (a stage in ``aliases`` repeats its input)."""
    out = [0]
    for i, name in enumerate(chain, start=1):
        out.append(out[-1] if name in aliases else i)
    return out


def draw(entering_temperature: mx.array, final: mx.array, greedy: mx.array | None, noise: mx.array | None) -> mx.array:
    """Greedy rows take the argmax of the logits entering ``temperature``; the others a
    Gumbel-max draw from ``final``. greedy: [B] bool, or None where no row is greedy (no
    greedy draw is made); noise: [B, V], or None where every row is greedy. Returns [B]
    int32: the argmax's uint32 read as int32 (a view, no kernel; every id is below 2**31)."""
    sampled = None if noise is None else mx.argmax(final + noise, axis=-1)
    if greedy is None:
        best = sampled
    else:
        best = mx.argmax(entering_temperature, axis=-1)
        if sampled is not None:
            best = mx.where(greedy, best, sampled)
    return mx.view(best, mx.int32)


def apply_chain(
    chain,
    aliases,
    use_noise,
    forms,
    raw: mx.array,
    inputs: Mapping[str, mx.array],
    noise: mx.array,
    any_greedy: bool = True,
):
    """The chain's body (traced by ``mx.compile``): ``raw``, then each stage not in
    ``aliases`` in its form, and the draw. Returns every output [B, V] and the tokens [B].
    A constraint after ``temperature`` also applies to what greedy rows draw from (the
    logits entering ``temperature``): the draw never picks a token it forbids. Without
    ``any_greedy`` (every row samples) that draw is not made: an argmax over the
    vocabulary and a select fewer, and a constraint applied once."""
    TRACES["count"] += 1
    logits = raw.astype(mx.float32)
    inputs = {**inputs, "raw": logits}  # a constraint falls back on it (``grammar``)
    outputs = [logits]
    entering = None
    view = None  # the sort of the logits a bounded top_k made, while the stages keep it
    for name, form in zip(chain, forms, strict=True):
        stage = STAGES[name]
        if stage.spec.marks_greedy and any_greedy:
            entering = logits
        if name not in aliases:
            if form == "bounded" and stage.viewed is not None:
                logits, view = stage.viewed(logits, inputs, view)
            else:
                logits, view = stage.apply_form(form)(logits, inputs), None
            if stage.spec.constraint and entering is not None:
                entering = stage.apply(entering, inputs)  # greedy rows draw inside it too
        outputs.append(logits)
    greedy = inputs["greedy"] if any_greedy or not use_noise else None
    tokens = draw(logits if entering is None else entering, logits, greedy, noise if use_noise else None)
    return outputs, tokens


def compiled_once(key: tuple, make):
    """``mx.compile(make())``, kept under ``key`` in a bounded cache (the least used leaves)."""
    key = (cpu_forms(), *key)  # the forms are traced into it
    if key in _COMPILED:
        _COMPILED.move_to_end(key)
        return _COMPILED[key]
    compiled = _COMPILED[key] = mx.compile(make())
    while len(_COMPILED) > MAX_COMPILED_CHAINS:
        _COMPILED.popitem(last=False)
    return compiled


def _compiled(chain: tuple[str, ...], aliases: frozenset[str], use_noise: bool, forms: tuple[str | None, ...]):
    return compiled_once(
        ("chain", chain, aliases, use_noise, forms), lambda: partial(apply_chain, chain, aliases, use_noise, forms)
    )


def run_chain(
    logits: mx.array,
    chain: Sequence[str],
    inputs: Mapping[str, mx.array],
    noise: mx.array | None = None,
    aliases: frozenset[str] = frozenset(),
    forms: Sequence[str | None] | None = None,
) -> ChainResult:
    """One sampling step. logits: [B, V] of any float dtype; ``inputs`` holds every input
    the chain's stages read ([B, 1] columns, [B, V] state) and ``greedy`` [B] bool.
    Stages in ``aliases`` are the identity for every row (see :func:`group_aliases`);
    ``forms`` names each stage's form (:func:`group_forms`; None: the general one)."""
    chain = tuple(chain)
    forms = tuple(forms) if forms is not None else (None,) * len(chain)
    fn = _compiled(chain, frozenset(aliases), noise is not None, forms)
    outputs, tokens = fn(logits, dict(inputs), noise if noise is not None else mx.array(0.0))
    return ChainResult(chain, list(outputs), tokens, frozenset(aliases))


def group_chain(params: Sequence[SamplingParams]) -> tuple[str, ...]:
    """The stages any of these rows (which share one ``samplers`` order) needs, in order."""
    needed = {name for p in params for name in row_chain(p)}
    return tuple(name for name in chain_order(params[0].samplers) if name in needed)


def group_aliases(params: Sequence[SamplingParams], chain: Sequence[str]) -> frozenset[str]:
    """The stages of ``chain`` that leave every row's logits as they are (e.g. temperature
    when every row is greedy): not computed, their output is their input."""
    return frozenset(name for name in chain if all(STAGES[name].is_identity(p) for p in params))


def group_forms(params: Sequence[SamplingParams], chain: Sequence[str]) -> tuple[str | None, ...]:
    """Each stage's cheapest form that every row allows (``Stage.forms``, ``chain_forms``;
    None: the general one)."""
    forms: list[str | None] = []
    for i, name in enumerate(chain):
        forms.append(STAGES[name].form_for(params, chain[:i], forms))
    return tuple(forms)


def columns(params: Sequence[SamplingParams], chain: Sequence[str]) -> dict[str, mx.array]:
    """The [B, 1] parameter columns the stages of ``chain`` read, plus ``greedy`` [B]."""
    out: dict[str, mx.array] = {"greedy": mx.array([p.greedy for p in params])}
    for name in chain:
        stage = STAGES[name]
        values = [stage.columns(p) for p in params]
        for key in values[0] if values else ():
            dtype = np.int32 if key in stage.int_columns else np.float32
            out[key] = mx.array(np.asarray([v[key] for v in values], dtype=dtype).reshape(-1, 1))
    return out


def step_key(seed: int, index: int) -> mx.array:
    """The RNG key of a request's ``index``-th token: a function of seed and index only,
    so draws never depend on the batch, and a branch replays the same keys."""
    return mx.random.key(splitmix64(seed ^ splitmix64(index)))


def step_keys(seeds: Sequence[int], indices: Sequence[int]) -> mx.array:
    """[B, 2] uint32: :func:`step_key` of each row, made on the host in one array (the
    key of a 64-bit seed is its high and low words)."""
    words = [splitmix64(seed ^ splitmix64(index)) for seed, index in zip(seeds, indices, strict=True)]
    return mx.array(np.array([[w >> 32, w & 0xFFFFFFFF] for w in words], dtype=np.uint32).reshape(-1, 2))


def gumbel_noise(keys: Sequence[mx.array] | mx.array, vocab: int) -> mx.array:
    """[B, V] float32 Gumbel noise, each row from its own key (``keys``: [B, 2] uint32 or a
    list of keys), drawn for every row at once: the same values as one draw per row."""
    stacked = keys if isinstance(keys, mx.array) else mx.stack(list(keys))
    return _gumbel_rows(vocab)(stacked)


def _gumbel_rows(vocab: int, fused: bool | None = None):
    """The rows' draw: on a GPU compiled, its eight element-wise steps after the random bits
    one kernel (a launch each uncompiled); on MLX's CPU backend as it is, where its own
    vectorized ops beat the compiled loop (measured on 8 rows of 49,152). The
    same bits either way (``tests/engine/sampling/test_sampler.py``)."""
    fused = not cpu_forms() if fused is None else fused
    fn = _GUMBEL.get((vocab, fused))
    if fn is None:
        fn = mx.vmap(lambda key: mx.random.gumbel(shape=(vocab,), key=key))
        fn = _GUMBEL[(vocab, fused)] = mx.compile(fn) if fused else fn
    return fn


_GUMBEL: dict[tuple[int, bool], object] = {}
