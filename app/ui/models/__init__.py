"""The Models work area: library, Hub downloads and LoRA adapters (``ModelManager``)."""

from app.ui.models.manager import ModelManager

__all__ = ["ModelManager"]
