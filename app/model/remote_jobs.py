"""What the connect dialog hands the worker to use a server instead of the local engine.

Everything a server does differently (fork as one stream per variant, continuing from
text, no scoring) lives in the remote backend behind the calls of ``engine.api.backend``;
the worker drives it as it drives the local engine. :class:`RemoteSpec` keeps its key in
memory only (``repr`` hides it).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RemoteSpec:
    url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    stage: str = "auto"
    timeout: float = 60.0
    chat_template: str | None = None

    def backend(self):
        """A ``engine.remote.backend.RemoteBackend`` for this server (imported here: httpx is
        loaded only when a server is used)."""
        from engine.remote.backend import RemoteBackend

        return RemoteBackend(
            self.url, api_key=self.api_key, stage=self.stage, timeout=self.timeout, chat_template=self.chat_template
        )
