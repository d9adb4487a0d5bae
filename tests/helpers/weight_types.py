"""Models of each common weight type, for the exactness tests (app.engine.llama.weight_kernels).

Two kinds, generated once into ``tests/.assets``:

- **tiny**: the tiny llama shape widened to ``n_embd`` 256 (one K-quant super-block per row)
  and ``n_ff`` 2048, written as Q8_0 and requantized by llama.cpp (``llama_model_quantize``)
  to Q4_0, Q4_1, Q5_0, Q8_0, Q5_K_M, Q4_K_M, Q6_K and BF16 — every tensor of the chosen type
  where the type's block fits. A few MB each; a forward pass costs microseconds.
- **smollm2**: the default SmolLM2-135M requantized to Q4_K_M and Q6_K. Its 576-wide rows and
  1536-wide feed-forward reach the kernels whose sums depend on the ubatch (the tiled K-quant
  matmul, the repacked Q4_K gemm/gemv): with llama.cpp's defaults both models give other
  logits batched than alone, and chunked than whole, on the AMD EPYC this was written on
  (``GGML_CPU_TILED_MM=1`` and extra buffer types on), where the tiny K-quant models do not.
  ~100-140 MB each.

NOTE: f16 weights are not here: the tiny F16 model's logits differ (by ~0.004) between a
prompt read whole and with its last five tokens one a tick, in llama.cpp's f16 matmul, and
Hearth has no row-independent choice for it yet.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import llama_cpp

from tests.helpers.tiny_model import LlamaShape, ensure_asset, smollm2_gguf_path, write_tiny_model

WIDE_SHAPE = LlamaShape(n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=2048)
TINY_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q5_K_M", "Q4_K_M", "Q6_K")
SMOLLM2_TYPES = ("Q4_K_M", "Q6_K")


def quantize(source: Path, target: Path, ftype: str) -> Path:
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.allow_requantize = True
    params.nthread = 2
    llama_cpp.llama_backend_init()
    rc = llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize to {ftype} failed ({rc})")
    return target


def ensure_wide_model(directory: Path | str | None = None) -> Path:
    return ensure_asset(directory, "tiny-wide-q8_0", lambda p: write_tiny_model(p, shape=WIDE_SHAPE))


def ensure_weight_type_model(base: str, ftype: str, directory: Path | str | None = None) -> Path:
    """``base`` "tiny" or "smollm2", requantized to ``ftype`` (cached)."""
    if base == "tiny":
        if ftype == "Q8_0":
            return ensure_wide_model(directory)
        source = ensure_wide_model(directory)
    elif base == "smollm2":
        source = smollm2_gguf_path()
    else:
        raise ValueError(base)
    return ensure_asset(directory, f"{base}-{ftype.lower()}", lambda p: quantize(source, p, ftype))
