"""The tiny Qwen3-style model (tests/support/tiny_reasoning.py) with the template of Qwen3's
thinking models: the generation prompt opens ``<think>`` (as Qwen3-Thinking-2507's does),
and ``enable_thinking=False`` still closes it there, as Qwen3's template does. Random
weights never write ``</think>`` themselves: the thinking budget ends the thinking.

``python -m tests.support.tiny_thinking FOLDER`` writes it (the README's thinking screenshot)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.tiny_model import write_tiny_model
from tests.support.tiny_reasoning import QWEN3_TEMPLATE, qwen3_tokenizer

NO_THINK = (
    "{%- if enable_thinking is defined and enable_thinking is false %}\n        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
)
THINKING_TEMPLATE = QWEN3_TEMPLATE.replace(NO_THINK, NO_THINK + "    {%- else %}\n        {{- '<think>\\n' }}\n")


def write_thinking_qwen3(folder: Path, seed: int = 0) -> Path:
    """The tiny Qwen3-style model whose generation prompt opens the thinking."""
    assert THINKING_TEMPLATE != QWEN3_TEMPLATE, "Qwen3's template changed: the thinking opening was not added"
    return write_tiny_model(folder, seed, tokenizer=qwen3_tokenizer(), template=THINKING_TEMPLATE)


if __name__ == "__main__":
    print(write_thinking_qwen3(Path(sys.argv[1])))
