"""The user turn the store saves for a text scored without a prompt: its label, and the one
an imported scored text gets (the model layer reads them back: ``app.model.scored``)."""

from __future__ import annotations

SCORE_LABEL = "Scored text: "
IMPORTED_LABEL = "(scored text)"
"""The user turn of an imported scored text that answered no prompt (``app.store.export_store``)."""


def score_label(text: str) -> str:
    """The user turn of a text scored without a prompt (the one with a prompt is the prompt):
    the start of the text's first line."""
    return SCORE_LABEL + text.strip().splitlines()[0][:50]
