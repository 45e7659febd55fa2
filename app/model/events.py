"""A small event mechanism for the Qt-free model layer (napari's ``EmitterGroup``, cut down).

A model owns an :class:`EmitterGroup`; each event is an :class:`EventEmitter` that views
``connect`` a callback to (``model.events.tokens_added.connect(self._on_tokens_added)``)
and the model calls (``self.events.tokens_added(key)``). Callbacks run synchronously, in
the order they were connected, on the thread that emitted: the model layer is used from
the GUI thread only, so views may touch widgets in their callbacks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Callback = Callable[..., Any]


class EventEmitter:
    def __init__(self, name: str) -> None:
        self.name = name
        self._callbacks: list[Callback] = []
        self._blocked = 0

    def connect(self, callback: Callback) -> Callback:
        if callback not in self._callbacks:
            self._callbacks.append(callback)
        return callback

    def disconnect(self, callback: Callback | None = None) -> None:
        """Remove ``callback`` (every callback when None); unknown callbacks are ignored."""
        if callback is None:
            self._callbacks.clear()
        elif callback in self._callbacks:
            self._callbacks.remove(callback)

    def disconnect_owner(self, owner: object) -> None:
        """Remove every bound method of ``owner`` (a view being closed)."""
        self._callbacks = [cb for cb in self._callbacks if getattr(cb, "__self__", None) is not owner]

    @property
    def callbacks(self) -> tuple[Callback, ...]:
        return tuple(self._callbacks)

    @contextmanager
    def blocker(self) -> Iterator[None]:
        """Nothing is emitted inside the block (napari's ``events.blocker``)."""
        self._blocked += 1
        try:
            yield
        finally:
            self._blocked -= 1

    def __call__(self, *args: Any) -> None:
        if self._blocked:
            return
        for callback in list(self._callbacks):
            callback(*args)


class EmitterGroup:
    """Named emitters as attributes: ``EmitterGroup("selection_changed").selection_changed``."""

    def __init__(self, *names: str) -> None:
        self._emitters = {name: EventEmitter(name) for name in names}

    def __getattr__(self, name: str) -> EventEmitter:
        try:
            return self.__dict__["_emitters"][name]
        except KeyError:
            raise AttributeError(f"no event named {name!r}") from None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._emitters)

    def disconnect_owner(self, owner: object) -> None:
        for emitter in self._emitters.values():
            emitter.disconnect_owner(owner)
