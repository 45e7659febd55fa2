"""Server → Start serving…: the app as an OpenAI-compatible server.

``ServingController`` owns the actions, the dialog (``app.views.serve_dialog``), the Served
list's dock (``app.views.served_list``), the status bar's address and request count, and the
HTTP server (``engine.serve.server_thread.ServerThread``: Starlette under uvicorn, on a
thread of its own). The server talks to the engine through :class:`AppEngine`, the app's
``engine.serve.seam.ServingEngine``:

- a request, checked by the server (``engine.serve.request_fields``: a 400 naming the field
  before anything else happens), crosses to the GUI thread as a queued signal; there the
  model layer stores it as a conversation and sends the worker a ``ServedJob``
  (``app.model.served``), so it runs in the worker's one scheduler beside the app's own
  replies;
- its events go to the client from the worker's thread, and to the GUI under the reply's tag;
- a client that goes away cancels its request through a queued signal to the worker.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtWidgets import QDockWidget, QLabel, QWidget

from app.model.served import refuse
from app.model.served_writer import ServedWriter
from app.shell.controllers.served_cleanup import ServedCleanup
from app.views.serve_dialog import ServeChoice, ServeDialog
from app.views.served_list import ServedList
from engine.api.backend import ModelInfo
from engine.serve.address import is_local
from engine.serve.request_fields import ServedRequest
from engine.serve.seam import Refused

if TYPE_CHECKING:
    from collections.abc import Callable

    from app.shell.context import ShellContext
    from engine.serve.limits import ServeLimits
    from engine.serve.server_thread import ServerThread

NO_MODEL = "Load a model first: the server serves the model in use."
NOT_SERVING = "The server is not running."
ALREADY = "The server is running: stop it first."
START_TIP = "Answer OpenAI API requests (chat, completions, logprobs) with the model in use; each one is inspectable."


class AppEngine(QObject):
    """The app's ``ServingEngine``: called on the server's threads, it reaches the GUI thread
    and the worker only through queued signals."""

    arrived = Signal(object, object, object)  # ServedRequest, sink, Future
    refused = Signal(object)  # engine.serve.seam.Refused: a 400 before it became a request
    cancel_requested = Signal(int)  # the request's id: its reply's tag (the worker's ``cancel``)

    def __init__(self, info: Callable[[], ModelInfo | None], token_bytes: Callable[[int], bytes]) -> None:
        super().__init__()
        self._info = info
        self._last: ModelInfo | None = info()
        self.token_bytes = token_bytes

    @property
    def info(self) -> ModelInfo:
        """The model in use (the one last loaded while a new one loads)."""
        self._last = self._info() or self._last
        return self._last

    def submit(self, request: ServedRequest, sink: Any) -> Future:
        started: Future = Future()
        self.arrived.emit(request, sink, started)
        return started

    def prepare(self, request: ServedRequest) -> ServedRequest:
        """As it is: the worker templates the messages it stores (``app.model.served``)."""
        return request

    def cancel(self, request_id: int) -> None:
        self.cancel_requested.emit(request_id)


class _Poster(QObject):
    """Calls handed over from another thread, run on the GUI thread (a queued signal)."""

    posted = Signal(object)

    def __init__(self, parent: QObject) -> None:
        super().__init__(parent)
        self.posted.connect(lambda call: call(), Qt.ConnectionType.QueuedConnection)


class ServingController(QObject):
    def __init__(
        self,
        context: ShellContext,
        place_dock: Callable[[str, str, QWidget], QDockWidget],
        open_conversation: Callable[[int], None],
    ) -> None:
        super().__init__(context.parent)
        self.context = context
        self.served = context.model.served
        # Served requests are written on a thread of their own: a burst leaves the window free.
        self.poster = _Poster(self)
        self.served.use_writer(ServedWriter(context.model.store.path, self.poster.posted.emit, context.model.store))
        self.cleanup = ServedCleanup(context, self.served)
        """Server → Keep served requests…, Delete served requests… (the retention)."""
        worker = context.link.engine.worker
        self.engine = AppEngine(lambda: context.in_use.info, worker.token_bytes)
        self.engine.arrived.connect(self._on_arrived, Qt.ConnectionType.QueuedConnection)
        self.engine.refused.connect(self._on_refused, Qt.ConnectionType.QueuedConnection)
        self.engine.cancel_requested.connect(worker.cancel, Qt.ConnectionType.QueuedConnection)
        worker.model_loaded.connect(self._on_model_loaded)
        self.server: ServerThread | None = None
        self.limits: ServeLimits | None = None
        """What the server takes at most (None: ``ServeLimits``' defaults; a bench raises them)."""
        self.choice: ServeChoice | None = None
        self.dialog: ServeDialog | None = None
        self.label = QLabel("")
        context.status.bar.addPermanentWidget(self.label)
        self.label.hide()
        self.list = ServedList()
        self.list.set_rows(self.served.rows)
        self.list.opened.connect(open_conversation)
        self.dock = place_dock("Served", "served", self.list)  # placed by the layout, shown when serving
        context.model.events.conversation_changed.connect(
            lambda conversation: self.list.select_conversation(conversation.id if conversation else None)
        )
        events = self.served.events
        events.added.connect(self._on_added)
        events.changed.connect(self._on_changed)
        events.removed.connect(self._on_removed)
        actions = context.actions
        self.start_action = actions.add(
            "Start serving…",
            self.open_dialog,
            capability="serve",
            needs=lambda: ALREADY if self.server is not None else ("" if context.in_use.info else NO_MODEL),
            tooltip=START_TIP,
            status_tip=START_TIP,
            prefix="",
        )
        self.stop_action = actions.add(
            "Stop serving", self.stop, needs=lambda: "" if self.server is not None else NOT_SERVING, prefix=""
        )
        self.list_action = self.dock.toggleViewAction()
        self.list_action.setText("Served requests")

    # Starting and stopping -----------------------------------------------------------------

    def open_dialog(self) -> None:
        info = self.context.in_use.info
        self.dialog = ServeDialog(info.name if info else "the model", self.choice, self.context.parent)
        self.dialog.accepted.connect(lambda: self.start(self.dialog.choice()))
        self.dialog.open()

    def start(self, choice: ServeChoice) -> bool:
        """Listen on ``choice``'s address; False (and the reason in the dialog and the status
        bar) when it cannot."""
        from engine.serve.server_thread import ServerThread

        if self.server is not None:
            return False
        try:
            self.server = ServerThread(
                self.engine, choice.host, choice.port, choice.api_key, self.limits, self.engine.refused.emit
            )
        except OSError as exc:
            message = f"Could not start serving: {exc}"
            self.context.status.show_message(message, 8000)
            if self.dialog is not None:
                self.dialog.show_error(message)
                self.dialog.open()
            return False
        self.choice = choice
        self.list.set_heading(self.server.url)
        self.dock.show()
        self.dock.raise_()
        warning = "" if is_local(choice.host) else " — other machines can reach it (API key asked)"
        self.context.status.show_message(f"Serving on {self.server.url}{warning}.", 8000)
        self._update_label()
        self.context.actions.refresh()
        return True

    def stop(self) -> None:
        """Stop listening; the requests being written end (their clients get the end)."""
        if self.server is None:
            return
        for tag in list(self.served.live):
            self.context.model.events.cancel_requested(tag)
        self.server.stop()
        self.server = None
        self.list.set_heading("")
        self._update_label()
        self.context.status.show_message("Stopped serving.")
        self.context.actions.refresh()

    def close(self) -> None:
        """The window closes: the writes submitted are done (before the store closes)."""
        self.stop()
        self.served.close()

    # The model layer's reports ----------------------------------------------------------------

    @Slot(object, object, object)
    def _on_arrived(self, request: ServedRequest, sink: Any, started: Future) -> None:
        if self.server is None:  # stopped while it crossed over
            refuse(started, RuntimeError("the server stopped."))
            return
        self.served.arrive(request, sink, started)

    @Slot(object)
    def _on_refused(self, refusal: Refused) -> None:
        """A request refused with a 400 before it became a conversation: listed with its error."""
        self.served.refused(refusal)

    @Slot(object)
    def _on_model_loaded(self, info: ModelInfo) -> None:
        """A server connected in the model's place cannot be served from here: serving stops
        and says why (a model loaded instead is served from its next request on)."""
        if self.server is not None and (why := info.capabilities.reason("serve")):
            self.stop()
            self.context.status.show_message(f"Stopped serving: {why}", 8000)

    def _on_added(self, row) -> None:
        self.list.add_row(row, row.finish_reason is None)  # a refused one came ended
        self._update_label()

    def _on_changed(self, row) -> None:
        # A row changes while it is written (a token) or as it ends (its finish reason set):
        # live until then. (A row a crash left unended never changes.)
        self.list.update_row(row, row.finish_reason is None)

    def _on_removed(self, row_id: int) -> None:
        self.list.remove_row(row_id)
        self._update_label()

    def _update_label(self) -> None:
        if self.server is None:
            self.label.hide()
            return
        count = self.served.count
        self.label.setText(f"Serving {self.server.url} · {count} request{'s' if count != 1 else ''}")
        self.label.setToolTip("Server → Stop serving ends it; the Served list shows each request.")
        self.label.show()
