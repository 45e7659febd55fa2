"""Jobs on a remote server: what the worker does differently when its backend is an
OpenAI-compatible server (``engine.remote.RemoteBackend``).

A server has no fork: a compare run is N streams started one after the other (no
``Divergence`` events: that needs whole distributions, which no server sends). A branch
continues from text (the reply's text before the picked token, and that token's text),
which the jobs carry. :class:`RemoteSpec` is what the connect dialog hands the worker;
its key stays in memory (``repr`` hides it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.model.jobs import ChatJob, ForkJob


@dataclass(frozen=True)
class RemoteSpec:
    url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    stage: str = "auto"
    timeout: float = 60.0
    chat_template: str | None = None

    def backend(self):
        from engine.remote import RemoteBackend

        return RemoteBackend(
            self.url, api_key=self.api_key, stage=self.stage, timeout=self.timeout, chat_template=self.chat_template
        )


def is_remote_session(session) -> bool:
    info = getattr(session, "info", None)
    return info is not None and getattr(info, "backend", "local") == "remote"


def start_remote(session, job: ChatJob | ForkJob) -> list:
    """Start ``job`` on a remote backend; one StartedRequest per reply."""
    messages = list(job.messages)
    if isinstance(job, ForkJob):
        if job.output:
            # "Compare from here": each variant continues the reply's text from that token.
            text = getattr(job, "output_text", None) or ""
            return [session._begin(messages, p, text, len(job.output), None) for p in job.variants]
        return [session.start(messages, p) for p in job.variants]
    if job.forced_token is None:
        return [session.start(messages, job.params)]
    return [
        session.continue_reply(
            messages,
            job.output,
            job.forced_token,
            job.params,
            output_text=getattr(job, "output_text", None),
            forced_text=getattr(job, "forced_text", None),
        )
    ]
