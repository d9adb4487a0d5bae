"""Models of each common weight type, for the exactness tests (app.engine.llama.weight_kernels).

Two kinds, generated once into ``tests/.assets``:

- **tiny**: the tiny llama shape widened to ``n_embd`` 256 (one K-quant super-block per row)
  and ``n_ff`` 2048, written as Q8_0 and requantized by llama.cpp (``llama_model_quantize``)
  to Q4_0, Q4_1, Q5_0, Q8_0, Q5_K_M, Q4_K_M and Q6_K — every tensor of the chosen type where
  the type's block fits — and written as F16 and BF16 from the same draws. A few MB each
  (F16/BF16 ~30 MB); a forward pass costs microseconds. The float ones take the kernels an f16
  or bf16 SmolLM2 takes (measured with ``perf`` on the AMD EPYC: llamafile's tinyBLAS 4x6 and
  4x5 tiles for prompts, ``ggml_vec_dot_f16``/``_bf16`` for one-row ubatches, or tinyBLAS's
  one-row gemv with Hearth's switch): every weight's rows (128-49152) and columns (256, 2048)
  are multiples of 16 and 32, as SmolLM2's (192-49152, 576, 1536) are.
- **smollm2**: the default SmolLM2-135M requantized to Q4_K_M and Q6_K. Its 576-wide rows and
  1536-wide feed-forward reach the kernels whose sums depend on the ubatch (the tiled K-quant
  matmul, the repacked Q4_K gemm/gemv): with llama.cpp's defaults both models give other
  logits batched than alone, and chunked than whole, on the AMD EPYC this was written on
  (``GGML_CPU_TILED_MM=1`` and extra buffer types on), where the tiny K-quant models do not.
  ~100-140 MB each.

NOTE: the float models are not requantized from the Q8_0 one: weights of 8 significant bits
times bf16 activations make many float sums exact in any order, so a requantized BF16 model
came out exact with llama.cpp's batch-dependent float kernels, where SmolLM2 as bf16 is not.
Written from the float draws, both tiny float models fail the exactness checks without
Hearth's switch (tests/integration/backend/test_float_mm_batch_invariant.py).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import gguf
import llama_cpp

from tests.helpers.tiny_model import LlamaShape, ensure_asset, smollm2_gguf_path, write_tiny_model

WIDE_SHAPE = LlamaShape(n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=2048)
FLOAT_TYPES = ("F16", "BF16")
"""Written with float weights directly (``ensure_wide_float_model``), not requantized."""
TINY_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q5_K_M", "Q4_K_M", "Q6_K", *FLOAT_TYPES)
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


def ensure_wide_float_model(ftype: str, directory: Path | str | None = None) -> Path:
    """The wide tiny model written with f16 or bf16 weights from the same draws (not
    requantized from its Q8_0 weights, whose few significant bits make float sums exact in any
    order: see the module note)."""
    qtype = gguf.GGMLQuantizationType[ftype]
    return ensure_asset(directory, f"tiny-wide-{ftype.lower()}",
                        lambda p: write_tiny_model(p, shape=WIDE_SHAPE, weights=qtype))


def ensure_weight_type_model(base: str, ftype: str, directory: Path | str | None = None) -> Path:
    """``base`` "tiny" or "smollm2", requantized to ``ftype`` (cached)."""
    if base == "tiny":
        if ftype == "Q8_0":
            return ensure_wide_model(directory)
        if ftype in FLOAT_TYPES:
            return ensure_wide_float_model(ftype, directory)
        source = ensure_wide_model(directory)
    elif base == "smollm2":
        source = smollm2_gguf_path()
    else:
        raise ValueError(base)
    return ensure_asset(directory, f"{base}-{ftype.lower()}", lambda p: quantize(source, p, ftype))
