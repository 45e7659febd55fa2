"""The KV cache's quantization from the app's side, Qt-free: the Models → KV cache
choice saved per model source, the setting a load sends, and the words the menu, the status
bar, the About box and Compare models use.

The engine does the quantizing (``engine.api.kv_quantization``, docs/ENGINE.md, "Quantized KV
cache"); the app offers three choices, each with the engine's default group of 64 numbers
and from the first token: off (the default), 8-bit and 4-bit. A choice is a number of bits,
0 for off.
"""

from __future__ import annotations

from typing import Any

from app.model.per_model import PerModelChoice
from engine.api.kv_quantization import KVQuantization

SETTINGS_KEY = "kv_cache_by_model"
"""QSettings key: a JSON object, model source -> bits (as ``precision_by_model``: a source may
hold slashes, which QSettings would read as groups)."""
OFF = 0
CHOICES = (OFF, 8, 4)
"""What the menu and the Compare models dialog offer, in their order."""
SERVER_KEEPS = "A server keeps its own KV cache: it is not quantized from here."

CHOICE_LABELS = {OFF: "Off", 8: "8-bit", 4: "4-bit"}
CHOICE_TIPS = {
    OFF: "The KV cache in the precision the model computes in: the numbers shown are the model's.",
    8: "Keys and values stored in 8 bits (groups of 64, from the first token): about half the memory "
    "of a float16 cache, and logprobs move a little. Compare models… measures it.",
    4: "Keys and values stored in 4 bits (groups of 64, from the first token): about a quarter of the "
    "memory of a float16 cache, and logprobs move more than at 8 bits. Compare models… measures it.",
}


CHOICE = PerModelChoice(SETTINGS_KEY, CHOICES, OFF, "the KV cache (bits)", CHOICE_LABELS, CHOICE_TIPS)
read_choices, choice_for, with_choice = CHOICE.read, CHOICE.choice_for, CHOICE.with_choice


def kv_setting(bits: int) -> KVQuantization | None:
    """What a load sends to the engine: None for off, else ``KVQuantization(bits)`` (group 64,
    from the first token)."""
    return KVQuantization(bits) if bits else None


def bits_of(kv: Any) -> int:
    """The choice a loaded model's ``ModelInfo.kv`` corresponds to (0 when off or not known)."""
    return getattr(kv, "bits", None) or OFF


def kv_label(kv: Any) -> str:
    """The status bar's words for a quantized KV cache, ``KV 8-bit`` (the app's own group
    and start) or ``KV 4-bit (group 32) from token 100``; "" when the cache is not quantized."""
    if kv is None or not getattr(kv, "enabled", False):
        return ""
    if kv.group_size == 64 and kv.start == 0:
        return f"KV {kv.bits}-bit"
    return f"KV {kv.describe()}"


def second_kv_label(described: str) -> str:
    """The same for a ``SecondModel.kv`` (``KVQuantization.describe``'s words)."""
    if not described or described == "off":
        return ""
    return "KV " + described.replace(" (group 64)", "", 1) if described.endswith("(group 64)") else f"KV {described}"


def about_kv(kv: Any) -> str:
    """The About box's sentence on the KV cache; "" when it is not quantized."""
    if kv is None or not getattr(kv, "enabled", False):
        return ""
    return (
        f"KV cache quantized: {kv.describe()}{' from the first token' if kv.start == 0 else ''} "
        "(less memory; logprobs move: Compare models… measures it)."
    )
