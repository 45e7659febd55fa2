"""Chat templates for GGUF files that carry none, by architecture.

llama.cpp's converter copies ``tokenizer.chat_template`` only when the original repo
had one, and conversions of base checkpoints (gemma-3-270m, say) often lack it, while
the model was trained on its family's turn format. llama.cpp formats such a chat with
its built-in template for the family; this module does the same, as Jinja that the
tokenizer's ``apply_chat_template`` runs. The Gemma template is Google's Gemma 3 one:
a system message joins the first user turn after a blank line, ``assistant`` is
``model``, every turn ends with ``<end_of_turn>`` and a newline.
"""

from __future__ import annotations

GEMMA = (
    "{{ bos_token }}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] | trim + '\\n\\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}"
    "{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)

_BY_ARCHITECTURE = {"gemma": GEMMA, "gemma2": GEMMA, "gemma3": GEMMA, "gemma3n": GEMMA}


def fallback_template(arch: str, tokens: list[str]) -> str | None:
    """The family's template for a file without one, when its vocabulary has the turn
    markers the template writes; None for other families (they chat as plain text)."""
    template = _BY_ARCHITECTURE.get(arch)
    if template is GEMMA and not {"<start_of_turn>", "<end_of_turn>"} <= set(tokens):
        return None
    return template
