"""The engine's thread. One ``EngineWorker`` lives in its own ``QThread`` and owns the
``EngineSession``; the GUI reaches it only through queued signals and slots.

Each decode step is one event of the worker's event loop (a zero-timeout timer
re-armed after every step), so a cancel or a parameter change queued while a
step runs applies to the next token.

Failures cross the thread as the exception object itself (superqt's
``errored = Signal(object)``), so a view can read ``SamplingParamsError.field``
and outline the widget of the field at fault; :func:`describe` makes the message.

Jobs (``app.model.jobs``) name their replies by the GUI's tags; every event goes back
with the tag, and a fork's ``Divergence`` with its group tag and its pairs as tags. The
worker calls only the calls of ``engine.api.backend.Backend`` on its session and decides by
the session's ``capabilities``, never by its type, so any backend can stand in for it
(the precision check, ``app.shell.controllers.precision_check``, calls ``check_fidelity``; Compare
models, ``app.shell.engine_thread.compare_runner``, ``load_second`` and ``compare_reply``; the logit
lens, ``app.shell.engine_thread.lens_runner``, ``lens_reply`` and ``lens_text``).

A load names the precision to compute in (``engine.api.precision``: the Models → Precision
choice saved for that model) and the KV cache's quantization (an
``engine.api.kv_quantization.KVQuantization`` or None: the Models → KV cache choice); a server
ignores the precision and refuses a KV cache that quantizes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import traceback
from typing import Any

from PySide6.QtCore import QObject, QThread, QTimer, Signal, Slot

from app.model.jobs import ChatJob, ForkJob
from app.model.replay import ReplayJob
from app.model.scored import ScoreJob
from app.model.served import ServedJob
from app.shell.engine_thread.score_steps import GenerationFailed, ScoreSteps
from app.shell.engine_thread.step_timer import step_timer
from engine.api.errors import EngineError, ModelLoadError
from engine.api.events import Divergence, Finished, PrefillProgress, TokenStep
from engine.api.params import SamplingParams, SamplingParamsError
from engine.serve.seam import deliver

__all__ = ["ChatJob", "EngineWorker", "ForkJob", "GenerationFailed", "WorkerThread", "describe"]


def describe(exc: BaseException) -> str:
    """The message to show: the engine's own words for its errors, the type for anything else."""
    from app.model.generation import ReplyFailed

    if isinstance(exc, (EngineError, ModelLoadError, SamplingParamsError, GenerationFailed, ReplyFailed)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


class EngineWorker(QObject):
    model_progressed = Signal(str, float)
    model_loaded = Signal(object)  # ModelInfo
    model_failed = Signal(str, object)  # source, exception
    job_started = Signal(int, int, int)  # tag, request id, prompt tokens
    job_rejected = Signal(int, object)  # tag, exception (SamplingParamsError carries .field)
    token_sampled = Signal(int, object)  # tag, TokenStep
    prefill_progressed = Signal(int, int, int)  # tag, done, total
    job_finished = Signal(int, object)  # tag, Finished
    divergence_measured = Signal(int, object)  # group tag, Divergence (pairs as tags)
    memory_measured = Signal(int)
    score_finished = Signal(int, object)  # tag, ScoreDone (a ScoreJob or ReplayJob that ran to its end)
    errored = Signal(object)  # exception
    shut_down = Signal()

    def __init__(self, session_factory: Any = None) -> None:
        super().__init__()
        self._session_factory = session_factory
        self._session = None
        self._local = None  # the local engine while a server is in use
        self._tags: dict[int, int] = {}  # request id -> the GUI's tag
        self._sinks: dict[int, Any] = {}  # a served request's id -> where its client's events go
        self._thinking: bool | None = None  # the Thinking switch of the app's own last prompt
        # A fork's group id (its first request id) -> its group tag and its members' tags.
        self._groups: dict[int, tuple[int, dict[int, int]]] = {}
        self._timer: QTimer | None = None
        self._scores = ScoreSteps(self)
        """Scored texts and replays, one chunk per event (``app.shell.engine_thread.score_steps``)."""

    def session_with(self, capability: str):
        """The session if its ``capabilities`` say it can do ``capability`` (an
        ``engine.api.capabilities`` name), else None; call on the worker's thread (the runners
        beside the worker do: ``app.shell.engine_thread.stepped_runner``)."""
        session = self._session
        return session if session is not None and getattr(session.capabilities, capability) else None

    def fidelity_session(self):
        """The session if it can run the precision check (``app.shell.controllers.precision_check``)."""
        return self.session_with("fidelity")

    def compare_session(self):
        """The session if it can compare models (``app.shell.engine_thread.compare_runner``)."""
        return self.session_with("compare_models")

    # The session is created on the worker thread: MLX objects belong to their thread.
    def _ensure_session(self):
        if self._session is None:
            if self._session_factory is None:
                from engine.session.session import EngineSession

                self._session = EngineSession()
            else:
                self._session = self._session_factory()
            self._timer = step_timer(self, self._step)
        return self._session

    @Slot(str, str, object)
    def load_model(self, source: str, precision: str = "auto", kv: Any = None) -> None:
        if self._session is not None and not self._session.capabilities.load_files:
            # A model file on a backend that serves its own models: back to the local
            # engine (kept aside while the server was in use).
            self._retire(self._session)
            self._session, self._local = self._local, None
        session = self._ensure_session()
        try:
            if session.has_work():
                session.cancel_all()
                self._flush_events(session.step())
            info = session.load(source, lambda stage, f: self.model_progressed.emit(stage, f), precision, kv=kv)
        except Exception as exc:  # the worker is the one place that catches broadly
            self.model_failed.emit(source, exc)
            return
        self.model_loaded.emit(info)
        self.memory_measured.emit(session.memory_bytes())

    @Slot(object)
    def connect_remote(self, spec) -> None:
        """Use a server (``app.model.remote_jobs.RemoteSpec``) instead of the current backend. The
        old one is stopped only once the server answered, so a failed connect leaves the
        previous model in place."""
        self._ensure_session()
        try:
            backend = spec.backend()
            info = backend.load(spec.model, lambda stage, f: self.model_progressed.emit(stage, f))
        except Exception as exc:
            self.model_failed.emit(spec.url, exc)
            return
        old = self._session
        if old is not None and not old.capabilities.load_files:  # another server: done with it
            self._retire(old)
        elif old is not None:
            # The local engine is stopped but kept: MLX cannot be used again on this thread
            # once its streams are released, so release_thread waits for shutdown.
            self._retire(old, release=False)
            self._local = old
        self._session = backend
        self.model_loaded.emit(info)
        self.memory_measured.emit(0)

    def _retire(self, session, release: bool = True) -> None:
        """Stop a backend's replies (their Finished events go out) and release it."""
        if session is None:
            return
        try:
            session.cancel_all()
            self._flush_events(session.step())
            if release:
                session.release_thread()
        except Exception:
            traceback.print_exc()

    @Slot(object)
    def submit(self, job: ChatJob | ForkJob) -> None:
        session = self._ensure_session()
        if isinstance(job, (ScoreJob, ReplayJob)):
            self._scores.submit(session, job)
            return
        if isinstance(job, ServedJob):
            self._serve(session, job)
            return
        tags = job.tags if isinstance(job, ForkJob) else (job.tag,)
        try:
            self._thinking = job.enable_thinking  # what a served request's start puts back
            started = self._start(session, job)
        except Exception as exc:
            for tag in tags:
                self.job_rejected.emit(tag, exc)
            return
        for tag, request in zip(tags, started, strict=True):
            self._tags[request.request_id] = tag
            self.job_started.emit(tag, request.request_id, len(request.prompt_tokens))
        if isinstance(job, ForkJob):
            members = {r.request_id: tag for tag, r in zip(tags, started, strict=True)}
            self._groups[started[0].request_id] = (job.group, members)
        self._schedule()

    def _serve(self, session, job: ServedJob) -> None:
        """A request from the app's server (``app.model.served``): started as a reply is, in
        the same scheduler (continuous batching with the app's own), its events to its
        client's sink as well as to the GUI; its client learns its id (the reply's tag, which
        no model load reuses: its cancel goes through :meth:`cancel`), or the refusal."""
        request = job.request
        if not job.started.set_running_or_notify_cancel():  # its client gave up while it crossed over
            self.job_rejected.emit(job.tag, EngineError("the client went away before its request started."))
            return
        try:
            if why := session.capabilities.reason("serve"):
                raise EngineError(f"serve: {why}")
            if request.chat:
                session.set_enable_thinking(None)  # the template's default, as a server's
                try:
                    started = session.start(list(request.messages), request.params)
                finally:  # the app's own prompts (a replay, a scored text) keep the person's
                    session.set_enable_thinking(self._thinking)
            else:
                started = session.start_text(request.prompt, request.params)
        except Exception as exc:
            job.started.set_exception(exc)
            self.job_rejected.emit(job.tag, exc)
            return
        self._tags[started.request_id] = job.tag
        self._sinks[started.request_id] = job.sink
        job.started.set_result(job.tag)
        self.job_started.emit(job.tag, started.request_id, len(started.prompt_tokens))
        self._schedule()

    def token_bytes(self, token_id: int) -> bytes:
        """A token's bytes for a served reply's logprobs; the server's threads call it (the
        session reads its tokenizer's vocabulary only). None of a backend that cannot serve
        (a server connected since: its replies' events are no longer the client's)."""
        session = self._session
        return session.token_bytes(token_id) if session is not None and session.capabilities.serve else b""

    @staticmethod
    def _start(session, job: ChatJob | ForkJob) -> list:
        """One ``StartedRequest`` per reply of ``job``, through the backend's own calls (a
        server emulates fork; the texts are for backends that continue from text)."""
        messages = list(job.messages)
        session.set_enable_thinking(job.enable_thinking)
        if isinstance(job, ForkJob):
            if job.output:
                return session.fork_reply(
                    messages, job.output, list(job.variants), output_text=job.output_text, carry=job.carry
                )
            return session.fork(messages, list(job.variants))
        if job.forced is None:
            return [session.start(messages, job.params)]
        return [
            session.continue_reply(
                messages,
                job.output,
                job.forced.token_id,
                job.params,
                output_text=job.output_text,
                forced_text=job.forced.text,
                carry=job.carry,
            )
        ]

    @Slot(int)
    def cancel(self, tag: int) -> None:
        session = self._ensure_session()
        if self._scores.cancel(tag):
            return
        for request_id, t in list(self._tags.items()):
            if t == tag:
                # It may have finished in the step that ran while this call was queued.
                with contextlib.suppress(EngineError):
                    session.cancel(request_id)
        self._schedule()

    @Slot(int, object)
    def update_params(self, tag: int, params: SamplingParams) -> None:
        session = self._ensure_session()
        for request_id, t in self._tags.items():
            if t == tag:
                try:
                    session.update_params(request_id, params)
                except (EngineError, SamplingParamsError) as exc:
                    self.errored.emit(exc)

    @Slot()
    def shutdown(self) -> None:
        """Stop everything and release MLX's per-thread state; call before the thread quits."""
        if self._timer is not None:
            self._timer.stop()
        self._scores.close()
        if self._session is not None:
            try:
                self._session.cancel_all()
                self._session.step()
                self._session.release_thread()
            except Exception:
                traceback.print_exc()
        if self._local is not None:  # the local engine kept aside while a server was in use
            self._retire(self._local)
            self._local = None
        self._tags.clear()
        self._sinks.clear()
        self._groups.clear()
        self.shut_down.emit()

    def writing(self) -> bool:
        """A reply (or a compare run) is being written: the stepped runners' jobs wait for it."""
        session = self._session
        return session is not None and session.has_work()

    def _schedule(self) -> None:
        if self._timer is not None and not self._timer.isActive():
            self._timer.start()

    @Slot()
    def _step(self) -> None:
        session = self._session
        if session is None or not session.has_work():
            return
        try:
            events = session.step()
        except Exception as exc:
            failure = GenerationFailed(f"generation failed: {type(exc).__name__}: {exc}")
            failure.__cause__ = exc
            self.errored.emit(failure)
            session.cancel_all()
            events = session.step()
        self._flush_events(events)
        if session.has_work():
            self._timer.start()
        else:
            self.memory_measured.emit(session.memory_bytes())

    def _flush_events(self, events) -> None:
        # A step's Divergence follows the Finished of a variant that ended at that step:
        # report every Finished last, so the run is still live when its divergence arrives.
        events = [e for e in events if not isinstance(e, Finished)] + [e for e in events if isinstance(e, Finished)]
        for event in events:
            if isinstance(event, Divergence):
                self._emit_divergence(event)
                continue
            deliver(self._sinks, event)  # a served request's client gets it from this thread
            tag = self._tags.get(event.request_id)
            if tag is None:
                continue
            if isinstance(event, TokenStep):
                self.token_sampled.emit(tag, event)
            elif isinstance(event, PrefillProgress):
                self.prefill_progressed.emit(tag, event.done, event.total)
            elif isinstance(event, Finished):
                del self._tags[event.request_id]
                self.job_finished.emit(tag, event)
        for group, (_, members) in list(self._groups.items()):
            if not any(rid in self._tags for rid in members):
                del self._groups[group]

    def _emit_divergence(self, event: Divergence) -> None:
        found = self._groups.get(event.group)
        if found is None:
            return
        group, members = found
        pairs = tuple((members[a], members[b]) for a, b in event.pairs)
        self.divergence_measured.emit(group, dataclasses.replace(event, pairs=pairs))


class WorkerThread:
    """Owns the QThread and the worker; ``stop()`` ends both cleanly."""

    def __init__(self, session_factory: Any = None) -> None:
        self.thread = QThread()
        self.thread.setObjectName("engine")
        self.worker = EngineWorker(session_factory)
        self.worker.moveToThread(self.thread)
        self.thread.start()

    def stop(self, timeout_ms: int = 30000) -> bool:
        if not self.thread.isRunning():
            return True
        from PySide6.QtCore import QMetaObject, Qt

        QMetaObject.invokeMethod(self.worker, "shutdown", Qt.ConnectionType.BlockingQueuedConnection)
        self.thread.quit()
        return self.thread.wait(timeout_ms)


def runtime_report() -> dict[str, object]:
    """Where the engine's code and MLX's libraries were loaded from (``--selftest`` prints it).
    Here because the worker is the one module of the app that loads the local engine."""
    from engine.session.session import runtime_report as report

    return report()
