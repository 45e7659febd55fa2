"""Running a scheduler to its end in a test, and picking one request's events out."""

from __future__ import annotations

from engine.api.events import Finished, TokenStep


def run(scheduler) -> list:
    """Every event until the scheduler has no work left."""
    events = []
    while scheduler.has_work():
        events += scheduler.step()
    return events


def steps_of(events, rid) -> list[TokenStep]:
    return [e for e in events if isinstance(e, TokenStep) and e.request_id == rid]


def done_of(events, rid) -> Finished:
    (done,) = [e for e in events if isinstance(e, Finished) and e.request_id == rid]
    return done
