"""The selected token and the reply followed as it grows (Qt-free): a part of
:class:`app.model.chat.ChatModel` that announces through the two emitters it is given."""

from __future__ import annotations

from collections.abc import Callable

from app.store.compare_runs import StreamKey, TokenRef


class Selection:
    """``ref``: the selected token (stream, index), or None. ``follow_latest``: the
    selection moves to each new token of the ``followed`` stream as it is written."""

    def __init__(
        self,
        changed: Callable[[TokenRef | None], None],
        renamed: Callable[[StreamKey, StreamKey], None],
    ) -> None:
        """``changed(ref)``: the selection moved; ``renamed(old, new)``: a stream was saved
        under a new key (a reply became a branch)."""
        self.changed, self.renamed = changed, renamed
        self.ref: TokenRef | None = None
        self.follow_latest = True
        self.followed: StreamKey | None = None

    def set(self, ref: TokenRef | None) -> None:
        if ref != self.ref:
            self.ref = ref
            self.changed(ref)

    def follow(self, stream: StreamKey) -> None:
        """Follow ``stream``'s newest token from now on."""
        self.followed = stream
        self.follow_latest = True

    def reset(self, followed: StreamKey | None = None) -> None:
        """Another conversation: nothing selected (no event: the chat refreshes after), the
        latest token followed, ``followed`` the stream to follow if one is being written."""
        self.ref, self.follow_latest, self.followed = None, True, followed

    def rename(self, old: StreamKey, new: StreamKey) -> None:
        """``old`` was saved as ``new``: the selection and the followed stream move with it."""
        if self.followed == old:
            self.followed = new
        self.renamed(old, new)
        if self.ref is not None and self.ref[0] == old:
            self.set((new, self.ref[1]))
