"""A request's reasoning inside the scheduler: the phase of each token, the thinking
budget's forced end marker, and the switch to ``think_variant`` after the thinking.

The scheduler asks :func:`next_forced` before a step (a budget's end marker is forced
like a branch's first token: the step reports the distribution, ``forced=True``), and
:func:`phase_of` for every accepted token; a request whose thinking just ended gets its
``switch_to`` set, which the scheduler applies after the step exactly as
``update_params`` applies a live change (the penalty window and DRY carried over).
"""

from __future__ import annotations

from engine.api.params import SamplingParams
from engine.api.reasoning import THINKING, ReasoningMarkers
from engine.runtime.reasoning_phase import Decode, PhaseTracker
from engine.runtime.requests import Request


def next_forced(request: Request) -> int | None:
    """The token this request must take at its next step, or None to draw one: a branch's
    first token, else the next token of an end marker the budget forces."""
    if not request.generated and request.forced_first is not None:
        return request.forced_first
    return request.forcing[0] if request.forcing else None


def tracker_for(request: Request, markers: ReasoningMarkers, decode: Decode) -> PhaseTracker:
    """The request's tracker, made at its first token from where its prompt left the phase
    (a continuation's earlier output is fed through it, so its thinking counts too)."""
    if request.phases is None:
        earlier = len(request.prompt) - request.index_offset
        tracker = PhaseTracker.after_prompt(markers, request.prompt[:earlier], decode)
        for token in request.prompt[earlier:]:
            tracker.feed(token)
        request.phases = tracker
    return request.phases


def continued_in_answer(request: Request, markers: ReasoningMarkers | None, decode: Decode) -> SamplingParams | None:
    """For a continuation whose earlier output passed the end of the thinking: its settings
    from its first token, ``think_variant`` taking over as it did in the reply it continues
    (a token picked in the answer is drawn on with the answer's settings; ``before_switch``
    says so). None: it starts before that end (or has no variant)."""
    if markers is None or request.params.think_variant is None or not request.index_offset:
        return None
    earlier = len(request.prompt) - request.index_offset
    tracker = PhaseTracker.after_prompt(markers, request.prompt[:earlier], decode)
    ended = False
    for token in request.prompt[earlier:]:
        before = tracker.phase
        tracker.feed(token)
        ended = ended or (before == THINKING and tracker.phase != THINKING)
    if not ended or tracker.phase == THINKING:
        return None
    request.before_switch = (request.index_offset, request.params)
    return switched(request.params)


def live_settings(request: Request, params: SamplingParams) -> SamplingParams:
    """A live change's settings: once the request's thinking has ended, ``params``' answer
    settings where it carries a ``think_variant`` (a change sent with the thinking's
    settings, by a caller that had not yet seen the answer start, must not bring them back
    into the answer)."""
    thinking = request.phases is not None and request.phases.phase == THINKING
    if params.think_variant is None or request.before_switch is None or thinking:
        return params
    return switched(params)


def phase_of(request: Request, token: int, markers: ReasoningMarkers | None, decode: Decode) -> str | None:
    """The phase of ``token``, just drawn (or forced) for ``request``; queues the budget's
    end marker and the switch to ``think_variant`` where they are due."""
    if markers is None:
        return None
    if request.forcing and request.generated and request.forcing[0] == token:
        request.forcing.pop(0)
    tracker = tracker_for(request, markers, decode)
    before = tracker.phase
    phase = tracker.feed(token)
    params = request.params
    if before == THINKING and tracker.phase != THINKING:
        request.forcing = []
        if params.think_variant is not None:
            request.switch_to = switched(params)
    budget = params.thinking_budget
    if budget is not None and not request.forcing and tracker.can_end and tracker.thinking_tokens >= budget:
        request.forcing = list(markers.end)
    return phase


def switched(params: SamplingParams) -> SamplingParams:
    """The settings after the thinking (``SamplingParams.answer_settings``)."""
    answer = params.answer_settings()
    assert answer is not None
    return answer
