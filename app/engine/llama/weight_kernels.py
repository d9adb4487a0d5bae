"""Weight kernels whose result for a row does not depend on the batch it shares.

Hearth's replies must not change with what else is in a tick or how a prompt was split: a
sequence decoded next to seven others, one restored from the cache, or read in chunks must
get the logits it would get alone. llama.cpp's CPU kernels for some weight types break that:

- **ggml-cpu's tiled matmul** (the K-quants Q2_K…Q6_K and the IQ types) is taken for
  ubatches of 8 rows or more, while fewer rows take the per-row ``vec_dot`` path, which sums
  in another order. A prompt's last token read alone or a decode tick of 7 sequences against 8
  then gives other low bits. ``GGML_CPU_TILED_MM=0`` keeps every ubatch on ``vec_dot``.
  NOTE: measured 2026-12-06 on an AMD EPYC (2 vCPUs), SmolLM2 requantized to Q6_K: tiled off
  costs 0.87 x prefill and nothing in decode; forcing the tiled path for every ubatch
  (``GGML_CPU_TILED_MM_FORCE=1``, exact too) costs 0.75 x single-sequence decode. Hearth
  reuses prompts instead of reading them again, so decode is what a user waits for: off.
  The switch is process-wide (read once by llama.cpp), and it only touches these types.
- **Repacked weights** (llama.cpp's "extra buffer types": a gemm for several rows, a gemv for
  one) of the K-quants and IQ types: the same kind of difference. They are not used for a
  model holding such tensors (``use_extra_bufts = False``). Q4_0, Q4_1, Q5_0 and Q8_0 keep
  them: their repacked kernels were exact in every split and batch tried
  (tests/integration/backend/test_exact_weight_types.py).

- **Float weights** (f16, bf16, f32): ggml-cpu multiplies them with llamafile's tinyBLAS
  when a ubatch has two rows or more, and with ``vec_dot`` for one row (a decode step, a
  prompt's last token read alone, the output layer of one logits row); the two sum a dot
  product in other orders, so a prompt read whole and the same prompt ending one token a tick
  give other logits (SmolLM2 as f16 or bf16: up to 0.07). Hearth's llama.cpp build
  (packaging/llama-cpp/patches/05-float-mm-batch-invariant.patch) adds ``MM_ENV``: one-row
  float matmuls take tinyBLAS too, as a gemv that reads the weight rows one after another,
  each sum in the order of the multi-row tiles. The other exact choice is ``vec_dot`` for every
  ubatch (llamafile's sgemm off).
  NOTE: measured 2026-12-06 on an AMD EPYC (2 vCPUs, AVX-512 with BF16), SmolLM2-135M as f16,
  CPU time, 1 thread: the switch costs nothing measurable (prefill of 512 tokens 1.07-1.11 s
  with and without it, decode 11.2-11.4 ms a token both ways); ``vec_dot`` for every ubatch
  costs 1.85 x prefill (2.0 s) for the same decode. So: tinyBLAS for every ubatch. Process-wide
  (read once by llama.cpp); quantized weights keep their own kernels.

A model's choice is part of its context key (``KernelChoice.cache_key``), so KV computed with
other kernels is never served to it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

TILED_ENV = "GGML_CPU_TILED_MM"
TILED_FORCE_ENV = "GGML_CPU_TILED_MM_FORCE"
FA_ENV = "GGML_CPU_FA_BATCH_INVARIANT"
"""Hearth's llama.cpp build (packaging/llama-cpp/patches/04-fa-batch-invariant.patch): every
flash-attention ubatch with f16 (or f32) K and V takes the tiled path, so a row's result does
not depend on the rows beside it (docs/design.md, "Flash attention that ignores the batch")."""
MM_ENV = "GGML_CPU_MM_BATCH_INVARIANT"
"""Hearth's llama.cpp build (packaging/llama-cpp/patches/05-float-mm-batch-invariant.patch):
f16, bf16 and f32 weight matmuls take llamafile's tinyBLAS for one-row ubatches too, so a row's
result does not depend on how many rows share its ubatch."""

BATCH_DEPENDENT = frozenset({
    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
    "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS", "IQ4_NL",
    "MXFP4",
})
"""Weight types whose tiled or repacked CPU kernels depend on the number of rows in a ubatch."""

FLOAT_MATMUL = frozenset({"F16", "BF16"})
"""Float weight types whose matmuls are row-independent only with ``MM_ENV`` (f32 is too, but
every model holds f32 norms, so f32 alone does not say that a model multiplies by f32)."""


def set_process_kernels() -> None:
    """Keep the tiled K-quant matmul off, and flash attention and float matmuls
    batch-invariant, in this process unless the environment says otherwise (before llama.cpp's
    first matmul and attention, which read them once)."""
    os.environ.setdefault(TILED_ENV, "0")
    os.environ.setdefault(FA_ENV, "1")
    os.environ.setdefault(MM_ENV, "1")


def fa_batch_invariant() -> bool:
    """Whether this process asks llama.cpp for batch-invariant flash attention (``FA_ENV``;
    unset, ``set_process_kernels`` will ask for it before llama.cpp's first use)."""
    try:
        return int(os.environ.get(FA_ENV, "1")) != 0
    except ValueError:
        return False


def mm_batch_invariant() -> bool:
    """Whether this process asks llama.cpp for batch-invariant float matmuls (``MM_ENV``;
    unset, ``set_process_kernels`` will ask for them before llama.cpp's first use)."""
    try:
        return int(os.environ.get(MM_ENV, "1")) != 0
    except ValueError:
        return False


def tiled_setting() -> str:
    """What llama.cpp's tiled matmul does in this process: "off", "forced" or "on" (not exact)."""
    if os.environ.get(TILED_FORCE_ENV, "").strip() == "1":
        return "forced"
    value = os.environ.get(TILED_ENV)
    try:
        return "on" if value is None or int(value) != 0 else "off"
    except ValueError:
        return "off"  # llama.cpp's atoi reads anything else as 0


@dataclass(frozen=True, slots=True)
class KernelChoice:
    weight_types: tuple[str, ...]
    """The weight types of the model's tensors, most common first."""
    batch_dependent: tuple[str, ...]
    """Those of them in ``BATCH_DEPENDENT``."""
    float_weights: tuple[str, ...] = ()
    """Those of them in ``FLOAT_MATMUL``."""

    @property
    def extra_bufts(self) -> bool:
        return not self.batch_dependent

    def cache_key(self) -> dict[str, Any] | None:
        """What goes into the context key (None for models whose kernels never vary)."""
        key: dict[str, Any] = {}
        if self.batch_dependent:
            key.update(weights="batch_dependent", extra_bufts=False, tiled_mm=tiled_setting())
        if self.float_weights:
            key["float_mm"] = "batch_invariant" if mm_batch_invariant() else "by_shape"
        return key or None

    def describe(self) -> str:
        parts = []
        if self.batch_dependent:
            parts.append(f"row-independent kernels for {', '.join(self.batch_dependent)} weights "
                         f"(tiled matmul {tiled_setting()}, no repacked weights)")
        if self.float_weights:
            how = "tinyBLAS for every ubatch" if mm_batch_invariant() else "llama.cpp's choice by ubatch size, not exact"
            parts.append(f"{', '.join(self.float_weights)} matmuls: {how}")
        return "; ".join(parts) or "llama.cpp's default kernels (exact for these weight types)"


class GgufInitParams(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]


@functools.cache
def ggml_base() -> Any:
    """llama.cpp's ggml-base library (already loaded with libllama), its GGUF reader typed."""
    from app.engine.llama.libs import lib_dir

    lib: Any = ctypes.CDLL(str(lib_dir() / "libggml-base.so"))
    lib.gguf_init_from_file.argtypes = [ctypes.c_char_p, GgufInitParams]
    lib.gguf_init_from_file.restype = ctypes.c_void_p
    lib.gguf_get_n_tensors.argtypes = [ctypes.c_void_p]
    lib.gguf_get_n_tensors.restype = ctypes.c_int64
    lib.gguf_get_tensor_type.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.gguf_get_tensor_type.restype = ctypes.c_int
    lib.gguf_find_key.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.gguf_find_key.restype = ctypes.c_int64
    lib.gguf_get_kv_type.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.gguf_get_kv_type.restype = ctypes.c_int
    lib.gguf_get_val_str.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.gguf_get_val_str.restype = ctypes.c_void_p
    lib.gguf_get_val_u32.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.gguf_get_val_u32.restype = ctypes.c_uint32
    lib.gguf_free.argtypes = [ctypes.c_void_p]
    lib.gguf_free.restype = None
    return lib


class GgufHeader:
    """An open GGUF header (``gguf_header``): its tensors' types and its metadata values."""

    def __init__(self, lib: Any, ctx: Any) -> None:
        self._lib, self._ctx = lib, ctx

    def weight_types(self) -> Counter[str]:
        import gguf

        lib, ctx = self._lib, self._ctx
        found: Counter[str] = Counter()
        for i in range(int(lib.gguf_get_n_tensors(ctx))):
            code = int(lib.gguf_get_tensor_type(ctx, i))
            try:
                found[gguf.GGMLQuantizationType(code).name] += 1
            except ValueError:
                found[f"type {code}"] += 1
        return found

    def value(self, key: str) -> str | int | None:
        """A string or uint32 metadata value (None: absent, or of another type)."""
        lib, ctx = self._lib, self._ctx
        i = int(lib.gguf_find_key(ctx, key.encode()))
        if i < 0:
            return None
        kv_type = int(lib.gguf_get_kv_type(ctx, i))
        if kv_type == 8:  # GGUF_TYPE_STRING
            return ctypes.string_at(lib.gguf_get_val_str(ctx, i)).decode(errors="replace")
        if kv_type == 4:  # GGUF_TYPE_UINT32
            return int(lib.gguf_get_val_u32(ctx, i))
        return None


@contextlib.contextmanager
def gguf_header(path: str) -> Iterator[GgufHeader | None]:
    """A GGUF's header read by llama.cpp's own parser (headers only: a few milliseconds for
    any size; gguf-py's reader takes seconds); None when it cannot be read (the load that
    follows says why)."""
    lib = ggml_base()
    ctx = lib.gguf_init_from_file(path.encode(), GgufInitParams(True, None))
    if not ctx:
        yield None
        return
    try:
        yield GgufHeader(lib, ctx)
    finally:
        lib.gguf_free(ctx)


def weight_types(path: str) -> Counter[str]:
    """The types of a GGUF's tensors (empty when it cannot be read)."""
    with gguf_header(path) as header:
        return header.weight_types() if header is not None else Counter()


def choose(path: str) -> KernelChoice:
    types = weight_types(path)
    ordered = tuple(name for name, _ in types.most_common())
    choice = KernelChoice(ordered, tuple(t for t in ordered if t in BATCH_DEPENDENT),
                          tuple(t for t in ordered if t in FLOAT_MATMUL))
    if choice.batch_dependent or choice.float_weights:
        log.info("%s: %s", path, choice.describe())
    return choice
