"""Models → KV cache (Off, 8-bit, 4-bit), beside Models → Precision.

The choice is saved per model source (``app.model.kv_cache``) and sent with every load of
that model (``app.shell.controllers.model_loading``, as ``engine.api.kv_quantization.KVQuantization``).
A server keeps its own cache, so the submenu is disabled while one is in use. A model the
engine refuses the setting for (a sliding-window model) fails to load like any other: its
message is shown, the previous model stays, and the saved choice goes back to what that
model runs with (:meth:`KVCacheMenu.revert_after_failure`).
"""

from __future__ import annotations

from app.model.kv_cache import CHOICE, SERVER_KEEPS, bits_of
from app.shell.controllers.per_model_menu import PerModelMenu
from engine.api.backend import ModelInfo


class KVCacheMenu(PerModelMenu):
    TITLE = "KV cache"
    MENU_TIP = (
        "Store the model's keys and values in fewer bits: less memory, and logprobs move (Compare models… measures it)."
    )
    CHOICE = CHOICE
    SERVER_REASON = SERVER_KEEPS
    RELOADING = "Reloading with the KV cache {label}…"

    def running(self, info: ModelInfo) -> int:
        return bits_of(info.kv)

    def revert_after_failure(self, source: str) -> None:
        """A load of ``source`` failed: if the model still in use is ``source`` (a refused KV
        setting on a reload), its saved choice goes back to what it runs with, so the menu and
        the next start say what is true."""
        info = self.context.in_use.info
        if info is None or info.source != source or not info.capabilities.load_files:
            return
        settings = self.context.settings
        if CHOICE.saved(settings, source) != bits_of(info.kv):
            CHOICE.save(settings, source, bits_of(info.kv))
        self.sync()
