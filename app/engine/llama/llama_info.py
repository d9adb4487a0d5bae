"""What a loaded GGUF says about itself, and the hash of the context settings that shape its KV.

``read_info`` builds the backend's ``BackendInfo`` (name, vocabulary size, quantization,
chat template, special tokens, a rough VRAM estimate) from the model's metadata;
``ctx_params_hash`` is the cache-identity part that depends on how the context was made
(docs/design.md §4). ``LlamaBackend`` calls both once, at load.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llama_cpp

from app.engine.backend import BackendInfo, MemoryCaps
from app.engine.llama.llama_handles import FTYPE_NAMES


def meta(model: Any, key: str) -> str | None:
    """One GGUF metadata value as text (None when the key is absent)."""
    size = 256
    while True:
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, size)
        if n < 0:
            return None
        if n < size:
            return buf.value.decode("utf-8", "replace")
        size = n + 1


def read_info(
    model: Any,
    *,
    path: str,
    fingerprint: bytes,
    ctx_hash: bytes,
    n_gpu_layers: int,
    token_piece: Callable[[int], bytes],
    extra: dict[str, Any],
    memory: MemoryCaps,
    kv_streams: int = 1,
) -> BackendInfo:
    """``BackendInfo`` of a loaded model; ``extra`` (the context's own sizes) is merged into
    ``info.extra`` after the model's facts."""
    vocab = llama_cpp.llama_model_get_vocab(model)
    ftype_text = meta(model, "general.file_type")
    ftype = int(ftype_text) if ftype_text and ftype_text.isdigit() else -1
    quant_type, quant_bits = FTYPE_NAMES.get(ftype, ("unknown", 0))
    size_b = int(llama_cpp.llama_model_size(model))
    n_layer = int(llama_cpp.llama_model_n_layer(model))
    if n_gpu_layers == 0:
        vram = 0
    else:
        vram = size_b if n_gpu_layers < 0 else size_b * min(n_gpu_layers, n_layer) // max(n_layer, 1)
    bos = llama_cpp.llama_vocab_bos(vocab)
    eos = llama_cpp.llama_vocab_eos(vocab)
    return BackendInfo(
        name=meta(model, "general.name") or Path(path).stem,
        n_ctx_train=int(llama_cpp.llama_model_n_ctx_train(model)),
        n_vocab=int(llama_cpp.llama_vocab_n_tokens(vocab)),
        quant_type=quant_type,
        quant_bits=quant_bits,
        fingerprint=fingerprint,
        ctx_params_hash=ctx_hash,
        chat_template=meta(model, "tokenizer.chat_template"),
        bos_token=token_piece(bos).decode("utf-8", "replace") if bos >= 0 else "",
        eos_token=token_piece(eos).decode("utf-8", "replace") if eos >= 0 else "",
        vram_estimate_b=vram,
        memory=memory,
        kv_streams=kv_streams,
        extra={
            "architecture": meta(model, "general.architecture") or "",
            "n_embd": int(llama_cpp.llama_model_n_embd(model)),
            "n_layer": n_layer,
            "n_params": int(llama_cpp.llama_model_n_params(model)),
            "size_b": size_b,
            "ftype": ftype,
            "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
            **extra,
        },
    )


def ctx_params_hash(
    type_k: str, type_v: str, flash_attn: bool, kv_unified: bool = False, swa_full: bool = True,
    extra_bufts: bool = True, kernels: dict[str, Any] | None = None,
) -> bytes:
    """sha256 of the context settings that change KV contents or the state format.

    Left out on purpose: n_seq_max (payloads are stored as one-stream states, see
    ``LlamaBackend.kv_pack``), n_ctx, n_batch/n_ubatch, threads. RoPE settings are always
    "from the model" here (0 / -1 = the GGUF's own values). ``kv_unified`` is in: a unified
    buffer can hold a sequence's cells out of position order, which changes its logits, so KV
    computed that way is not what a per-stream context would compute. ``swa_full`` is in for
    the same reason (a sliding-window cache smaller than the context wraps around: cells out of
    position order, ``ModelConfig.swa_full``).
    """
    canonical = {
        "state": "llama_state_seq/one_stream",
        "type_k": type_k,
        "type_v": type_v,
        "flash_attn": bool(flash_attn),
        "v_trans": not flash_attn,
        "kv_unified": bool(kv_unified),
        "rope_scaling_type": llama_cpp.LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED,
        "rope_freq_base": 0.0,
        "rope_freq_scale": 0.0,
        "yarn_ext_factor": -1.0,
        "swa_full": bool(swa_full),
    }
    if not extra_bufts:
        # Weights not repacked (app.engine.llama.native_probe's fallback) take other kernels, whose
        # sums can differ in the last bits for some weight types. Only added when off, so the
        # rows of every cache made with the default keep their key.
        canonical["extra_bufts"] = False
    if flash_attn and type_k == type_v and type_k in ("f16", "f32"):
        # Which flash-attention path f16/f32 K and V take (app.engine.llama.weight_kernels.FA_ENV):
        # batch-invariant, or llama.cpp's shape-dependent choice; their KV differs.
        from app.engine.llama.weight_kernels import fa_batch_invariant

        canonical["fa"] = "batch_invariant" if fa_batch_invariant() else "by_shape"
    if kernels:
        # Row-independent weight kernels for a model whose default ones depend on the batch
        # (app.engine.llama.weight_kernels): KV computed with other kernels is other KV.
        canonical["kernels"] = kernels
    blob = json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).digest()


def quant_heads_fit(model: Any) -> bool:
    """Whether every K and V head of ``model`` is a whole number of q8_0 blocks (32 values):
    llama.cpp refuses a quantized KV cache otherwise (GGUF ``<arch>.attention.key_length`` /
    ``value_length``, else ``n_embd / n_head``)."""
    arch = meta(model, "general.architecture") or ""
    n_head = int(llama_cpp.llama_model_n_head(model)) or 1
    default = int(llama_cpp.llama_model_n_embd(model)) // n_head
    for key in ("key_length", "value_length"):
        raw = meta(model, f"{arch}.attention.{key}")
        try:
            size = int(raw) if raw else default
        except ValueError:
            size = default
        if size % 32:
            return False
    return True
