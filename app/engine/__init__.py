"""The engine: scheduler and llama.cpp backend. No Qt imports (an import-linter contract)."""

from app.engine.config import ModelConfig
from app.engine.engine import Engine
from app.engine.errors import EngineError
from app.engine.events import CompletionResult, ModelInfo, PrefillResult, Stats
from app.engine.model import Model
from app.engine.stream import Stream

__all__ = [
    "CompletionResult",
    "Engine",
    "EngineError",
    "Model",
    "ModelConfig",
    "ModelInfo",
    "PrefillResult",
    "Stats",
    "Stream",
]
