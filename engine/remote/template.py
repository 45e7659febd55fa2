"""The served model's chat template, rendered here: how a reply is continued through
``/v1/completions`` on a server whose chat endpoint cannot continue an assistant message
(mlx_lm.server 0.32 always opens a new assistant turn).

The tokenizer is read from a folder given by the user, else from the served model's id
when it names a folder on this machine (mlx_lm.server names a local model by its path),
else from the local Hugging Face cache; nothing is ever downloaded. Where none is readable
the reason is kept, and the reply is asked for whole (``engine.remote.pieces``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

THINK_TAGS = ("<think>", "</think>")


class ChatTemplate:
    """The template of ``folder`` (a user's tokenizer folder) or of the served ``model`` id,
    loaded once, when first needed."""

    def __init__(self, folder: str | None) -> None:
        self._folder = folder
        self._tokenizer: Any = None
        self._encoder: Any = None  # the tokenizer, with or without a chat template
        self._tried = ""
        self._thinks: bool | None = None
        self.problem = ""
        """Why no template could be read ("" when one was, or none was tried yet)."""

    def tokenizer(self, model: str) -> Any:
        """The tokenizer for ``model`` (``folder`` first); None, with ``problem``, when none
        is readable here."""
        source = self._folder or model
        if self._tried == source:
            return self._tokenizer
        self._tried, self._tokenizer, self.problem, self._thinks = source, None, "", None
        try:
            self._tokenizer = _load(source, local_folder=bool(self._folder))
        except Exception as exc:  # any unreadable tokenizer: the reply is asked for whole, said why
            self.problem = f"its tokenizer is not readable here ({source}: {type(exc).__name__}: {exc})"[:300]
        self._encoder = self._tokenizer
        if self._tokenizer is not None and not getattr(self._tokenizer, "chat_template", None):
            self.problem, self._tokenizer = f"{source} has no chat template", None
        return self._tokenizer

    def encoder(self, model: str) -> Any:
        """The tokenizer for ``model`` to encode plain text (``/v1/completions``), a chat
        template or not; None when none is readable here (``problem`` says why)."""
        self.tokenizer(model)
        return self._encoder

    def render(self, model: str, messages: Sequence[Mapping[str, str]], enable_thinking: bool | None = None) -> str:
        """The chat's prompt text with the assistant's turn opened, as the server would encode
        it from its own template. A leading BOS is left out where the tokenizer adds one when
        encoding (the server's ``tokenizer.encode`` would add a second)."""
        tok = self.tokenizer(model)
        if tok is None:
            raise ValueError(self.problem)
        extra = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
        text = tok.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False, **extra)
        bos = getattr(tok, "bos_token", None)
        if bos and text.startswith(bos) and tok("a")["input_ids"][:1] == [tok.bos_token_id]:
            text = text[len(bos) :]
        return text

    def thinks(self, model: str) -> bool:
        """The model has think tags in its vocabulary (mlx-lm's own test for a reasoning model)."""
        tok = self.tokenizer(model)
        if tok is None:
            return False
        if self._thinks is None:
            vocab = tok.get_vocab()
            self._thinks = all(tag in vocab for tag in THINK_TAGS)
        return self._thinks


def _load(source: str, local_folder: bool) -> Any:
    from transformers import AutoTokenizer

    path = Path(source).expanduser()
    if path.is_dir():
        return AutoTokenizer.from_pretrained(str(path))
    if local_folder:
        raise FileNotFoundError("no such folder")
    # A hub id: only what the local cache already holds (never downloaded).
    return AutoTokenizer.from_pretrained(source, local_files_only=True)
