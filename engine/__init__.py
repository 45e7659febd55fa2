"""Logitscope's engine: models, the staged sampler, continuous batching. No Qt here."""

from engine.api.errors import EngineError, ModelLoadError
from engine.api.params import SamplingParams, SamplingParamsError

__all__ = ["EngineError", "ModelLoadError", "SamplingParams", "SamplingParamsError"]
