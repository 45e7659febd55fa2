"""Logitscope's engine: models, the staged sampler, continuous batching. No Qt here."""

from engine.errors import EngineError, ModelLoadError
from engine.params import SamplingParams, SamplingParamsError

__all__ = ["EngineError", "ModelLoadError", "SamplingParams", "SamplingParamsError"]
