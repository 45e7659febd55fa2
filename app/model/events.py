"""A small event mechanism for the Qt-free model layer (napari's ``EmitterGroup``, cut down).

A model owns an :class:`EventGroup`: a class that declares each of its events as an
annotated attribute, ``selection_changed: EventEmitter[[TokenRef | None]]``, so every
``model.events.<name>`` is checked by a static reading (a misspelt name is an attribute
the class does not have, not a new event). Each event is an :class:`EventEmitter` that
views ``connect`` a callback to (``model.events.tokens_added.connect(self._on_tokens_added)``)
and the model calls (``self.events.tokens_added(key)``). Callbacks run synchronously, in
the order they were connected, on the thread that emitted: the model layer is used from
the GUI thread only, so views may touch widgets in their callbacks.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Generic, ParamSpec

P = ParamSpec("P")
Callback = Callable[..., Any]


class EventEmitter(Generic[P]):
    """One event; ``EventEmitter[[int, str]]`` is called with an int and a str, and so are
    the callbacks connected to it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._callbacks: list[Callback] = []
        self._blocked = 0

    def connect(self, callback: Callable[P, Any]) -> Callable[P, Any]:
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

    @contextmanager
    def blocker(self) -> Iterator[None]:
        """Nothing is emitted inside the block (napari's ``events.blocker``)."""
        self._blocked += 1
        try:
            yield
        finally:
            self._blocked -= 1

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> None:
        if self._blocked:
            return
        for callback in list(self._callbacks):
            callback(*args, **kwargs)


class EventGroup:
    """Declared events: a subclass annotates each one (``changed: EventEmitter[[int]]``) and
    every instance gets its own emitter under that name, in the order declared."""

    _names: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = inspect.get_annotations(cls)  # this class's own, unevaluated
        declared = [n for n, kind in own.items() if "EventEmitter" in str(kind)]
        cls._names = (*cls._names, *(n for n in declared if n not in cls._names))

    def __init__(self) -> None:
        for name in self._names:
            setattr(self, name, EventEmitter(name))

    @property
    def names(self) -> tuple[str, ...]:
        return self._names

    def disconnect_owner(self, owner: object) -> None:
        for name in self._names:
            getattr(self, name).disconnect_owner(owner)
