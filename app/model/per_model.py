"""A choice the app remembers per model source (Models → Precision, Models → KV cache), Qt-free.

Saved as one JSON object (model source -> value) under one settings key: a source may hold
slashes, which QSettings would read as groups. The default is not stored, and anything
unreadable in the saved text reads as nothing saved, so a damaged setting never stops a load.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PerModelChoice:
    key: str
    """The settings key."""
    values: Sequence[Any]
    """What may be chosen (a saved value of another type, e.g. ``True`` for ``1``, is not)."""
    default: Any
    what: str
    """Its name in an error: ``precision``, ``the KV cache``."""
    labels: Mapping[Any, str] = field(default_factory=dict)
    """Each value's words in a menu."""
    tips: Mapping[Any, str] = field(default_factory=dict)
    """What each value means (its tooltip)."""

    def allowed(self, value: Any) -> bool:
        return any(value == v and type(value) is type(v) for v in self.values)

    def read(self, text: Any) -> dict[str, Any]:
        """The saved choices (the setting's JSON text)."""
        try:
            data = json.loads(text) if isinstance(text, str) else {}
        except ValueError:
            return {}
        if not isinstance(data, dict):
            return {}
        return {str(k): v for k, v in data.items() if self.allowed(v)}

    def choice_for(self, choices: dict[str, Any], source: str | None) -> Any:
        """The value saved for ``source``, else the default."""
        return choices.get(source or "", self.default)

    def with_choice(self, choices: dict[str, Any], source: str, value: Any) -> dict[str, Any]:
        """``choices`` with ``source``'s set to ``value`` (the default is not stored)."""
        if not self.allowed(value):
            listed = ", ".join(map(str, self.values))
            raise ValueError(f"{self.what} must be one of {listed}, got {value!r}.")
        out = {k: v for k, v in choices.items() if k != source}
        if value != self.default:
            out[source] = value
        return out

    def saved(self, settings: Any, source: str | None) -> Any:
        """The value chosen for ``source`` in ``settings`` (anything with QSettings' ``value``)."""
        return self.choice_for(self.read(settings.value(self.key, "{}")), source)

    def save(self, settings: Any, source: str, value: Any) -> None:
        settings.setValue(
            self.key, json.dumps(self.with_choice(self.read(settings.value(self.key, "{}")), source, value))
        )
