"""LoRA adapter files: what is in one, and whether it fits a given base model.

A LoRA GGUF as llama.cpp loads it (docs/design.md §3): ``general.type = "adapter"``,
``adapter.type = "lora"``, ``general.architecture`` of the base, ``adapter.lora.alpha``, and
for each adapted base weight ``W`` (ggml shape ``[n_in, n_out]``) two tensors::

    W.lora_a  [n_in, rank]        W.lora_b  [rank, n_out]        (ggml order, fastest first)

``check_adapter_matches`` compares those shapes with the base model's tensor table before the
engine hands the file to llama.cpp, so a wrong adapter is a clear ``AdapterMismatch`` rather
than a native load failure. Only headers are read (``library.read_gguf_header``); the sha256
of the adapter file is what the effective fingerprint (docs/design.md §4) is built from.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

from app.models.library import GGUFFormatError, GGUFHeader, read_gguf_header

log = logging.getLogger(__name__)

_SUFFIX_A = ".lora_a"
_SUFFIX_B = ".lora_b"


class AdapterError(ValueError):
    """An adapter (or its base model) file cannot be read or is not a LoRA adapter."""


class AdapterMismatch(AdapterError):
    """The adapter is a LoRA, but not one for this base model (architecture or shapes)."""


@dataclass(frozen=True, slots=True)
class AdapterTarget:
    """One adapted base weight and the shapes of its low-rank pair (ggml order)."""

    base_tensor: str
    lora_a_shape: tuple[int, ...]
    lora_b_shape: tuple[int, ...]

    @property
    def rank(self) -> int:
        return self.lora_a_shape[1] if len(self.lora_a_shape) > 1 else 0


@dataclass(frozen=True, slots=True)
class AdapterInfo:
    path: Path
    architecture: str | None
    alpha: float | None
    rank: int | None  # the common rank; None when targets disagree
    targets: tuple[AdapterTarget, ...]
    sha256: str
    size_bytes: int


def sha256_file(path: Path | str, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        while chunk := f.read(chunk_size):
            h.update(chunk)
    return h.hexdigest()


def _read(path: Path, what: str) -> GGUFHeader:
    if not path.is_file():
        raise AdapterError(f"{what} {path.name!r} does not exist ({path})")
    try:
        return read_gguf_header(path)
    except GGUFFormatError as e:
        raise AdapterError(f"{what} {path.name!r} is not a readable GGUF file: {e}") from e
    except OSError as e:
        raise AdapterError(f"{what} {path.name!r} cannot be read: {e.strerror or e}") from e


def _targets(path: Path, header: GGUFHeader) -> tuple[AdapterTarget, ...]:
    tensors = header.tensor_map()
    targets = []
    for name, t in tensors.items():
        if name.endswith(_SUFFIX_A):
            base = name[: -len(_SUFFIX_A)]
            b = tensors.get(base + _SUFFIX_B)
            if b is None:
                raise AdapterError(f"adapter {path.name!r}: {name} has no matching {_SUFFIX_B}")
            targets.append(AdapterTarget(base, t.shape, b.shape))
        elif name.endswith(_SUFFIX_B):
            if name[: -len(_SUFFIX_B)] + _SUFFIX_A not in tensors:
                raise AdapterError(f"adapter {path.name!r}: {name} has no matching {_SUFFIX_A}")
        else:
            raise AdapterError(
                f"adapter {path.name!r}: tensor {name!r} is neither a .lora_a nor a .lora_b"
            )
    if not targets:
        raise AdapterError(f"adapter {path.name!r} contains no LoRA tensors")
    return tuple(sorted(targets, key=lambda x: x.base_tensor))


def _require_lora(path: Path, header: GGUFHeader) -> None:
    md = header.metadata
    general_type = md.get("general.type")
    adapter_type = md.get("adapter.type")
    if general_type != "adapter" or adapter_type != "lora":
        what = "a model" if general_type in (None, "model") else f"of type {general_type!r}"
        raise AdapterMismatch(
            f"{path.name!r} is not a LoRA adapter (it is {what}; expected general.type "
            f"'adapter' and adapter.type 'lora', got {general_type!r}/{adapter_type!r})"
        )


def inspect_adapter(path: Path | str) -> AdapterInfo:
    """Read a LoRA adapter's header: architecture, alpha, rank, targets, and its file sha256.

    Raises ``AdapterMismatch`` when the file is a GGUF but not a LoRA adapter, and
    ``AdapterError`` when it is missing, unreadable, or its tensors are not lora_a/lora_b pairs.
    """
    path = Path(path)
    header = _read(path, "adapter")
    _require_lora(path, header)
    targets = _targets(path, header)
    ranks = {t.rank for t in targets}
    alpha = header.metadata.get("adapter.lora.alpha")
    arch = header.metadata.get("general.architecture")
    return AdapterInfo(
        path=path,
        architecture=arch if isinstance(arch, str) else None,
        alpha=float(alpha) if isinstance(alpha, int | float) else None,
        rank=ranks.pop() if len(ranks) == 1 else None,
        targets=targets,
        sha256=sha256_file(path),
        size_bytes=header.file_size,
    )


def _fmt(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def check_adapter_matches(adapter_path: Path | str, base_model_path: Path | str) -> AdapterInfo:
    """Check an adapter against a base model before attaching it; return its ``AdapterInfo``.

    Raises ``AdapterMismatch`` (a ``ValueError``) with a message naming the first problem:
    not a LoRA adapter, another architecture, a weight the model does not have, or a
    lora_a/lora_b shape that does not fit the model's weight.
    """
    adapter_path, base_model_path = Path(adapter_path), Path(base_model_path)
    info = inspect_adapter(adapter_path)
    base = _read(base_model_path, "model")
    if base.metadata.get("general.type") == "adapter":
        raise AdapterMismatch(f"{base_model_path.name!r} is an adapter, not a base model")
    base_arch = base.metadata.get("general.architecture")
    if info.architecture != base_arch:
        raise AdapterMismatch(
            f"adapter {adapter_path.name!r} is for architecture {info.architecture!r}, "
            f"but the model {base_model_path.name!r} is {base_arch!r}"
        )
    weights = base.tensor_map()
    for t in info.targets:
        w = weights.get(t.base_tensor)
        if w is None:
            raise AdapterMismatch(
                f"adapter {adapter_path.name!r} adapts {t.base_tensor}, which the model "
                f"{base_model_path.name!r} does not have"
            )
        a, b = t.lora_a_shape, t.lora_b_shape
        if len(w.shape) < 2 or len(a) < 2 or len(b) < 2:
            raise AdapterMismatch(
                f"adapter {adapter_path.name!r}: {t.base_tensor} is {_fmt(w.shape)} in the model "
                f"{base_model_path.name!r}, which a LoRA cannot adapt")
        n_in, n_out = w.shape[0], w.shape[1]
        if a[0] != n_in or b[1] != n_out or a[1] != b[0]:
            raise AdapterMismatch(
                f"adapter {adapter_path.name!r} does not fit the model "
                f"{base_model_path.name!r}: {t.base_tensor} is {_fmt(w.shape)} in the model, "
                f"but the adapter's lora_a is {_fmt(a)} and lora_b is {_fmt(b)} "
                f"(expected [{n_in}, rank] and [rank, {n_out}])"
            )
    return info
