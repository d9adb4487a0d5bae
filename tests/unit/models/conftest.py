"""Small GGUF writers for the model-library and adapter tests (no tokenizer: instant)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import gguf
import numpy as np
import pytest


def write_base_model(
    path: Path,
    *,
    arch: str = "llama",
    n_embd: int = 32,
    n_layer: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    file_type: gguf.LlamaFileType | None = gguf.LlamaFileType.ALL_F32,
    chat_template: str | None = None,
) -> Path:
    """A llama-shaped GGUF with attention weights only (ggml shape ``[n_in, n_out]``)."""
    n_kv = n_embd // n_head * n_head_kv
    w = gguf.GGUFWriter(path, arch)
    w.add_name("unit-base")
    w.add_type("model")
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    if file_type is not None:
        w.add_file_type(file_type)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    for i in range(n_layer):
        # numpy shape (n_out, n_in) → ggml shape [n_in, n_out]
        w.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((n_embd, n_embd), np.float32))
        w.add_tensor(f"blk.{i}.attn_v.weight", np.zeros((n_kv, n_embd), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_adapter(
    path: Path,
    *,
    arch: str = "llama",
    n_in: int = 32,
    n_out: dict[str, int] | None = None,
    rank: int = 4,
    n_layer: int = 2,
    targets: Iterable[str] = ("attn_q", "attn_v"),
    general_type: str = "adapter",
    adapter_type: str = "lora",
    alpha: float = 8.0,
    drop_b_of: str | None = None,
) -> Path:
    """A LoRA GGUF: ``W.lora_a`` ggml ``[n_in, rank]``, ``W.lora_b`` ``[rank, n_out]``."""
    n_out = n_out or {"attn_q": 32, "attn_v": 16}
    w = gguf.GGUFWriter(path, arch)
    w.add_type(general_type)
    w.add_string("adapter.type", adapter_type)
    w.add_float32("adapter.lora.alpha", alpha)
    for i in range(n_layer):
        for t in targets:
            name = f"blk.{i}.{t}.weight"
            w.add_tensor(name + ".lora_a", np.full((rank, n_in), 0.1, np.float32))
            if name != drop_b_of:
                w.add_tensor(name + ".lora_b", np.full((n_out[t], rank), 0.1, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def make_base(tmp_path: Path) -> Callable[..., Path]:
    def make(name: str = "base-F32.gguf", **kw: object) -> Path:
        return write_base_model(tmp_path / name, **kw)  # type: ignore[arg-type]

    return make


@pytest.fixture
def make_adapter(tmp_path: Path) -> Callable[..., Path]:
    def make(name: str = "lora.gguf", **kw: object) -> Path:
        return write_adapter(tmp_path / name, **kw)  # type: ignore[arg-type]

    return make
