"""Native handles and tables of the llama.cpp backend: the model file (checked and loaded), the
tick batch, LoRA adapter handles, context parameters, and llama.cpp's file-type and KV-type tables.

Batch layout. The tick batch is preallocated once (``n_batch`` rows) in numpy buffers that a
``llama_batch`` struct points into, so filling a tick is a few slice assignments:

    row:       0      1      2   ...   k-1    k   ...
    token:   [ t0 ] [ t1 ] [ t2 ]     [..]  [ d0 ]      rows in op order: a prefill slice, a decode row
    pos:     [ p  ] [ p+1] [ p+2]     [..]  [ q  ]
    seq_id:  ptr ──► seq[row]  (one seq per row; n_seq_id is always 1)
    logits:  [ 0  ] [ 0  ] [ 0  ]     [1?]  [ 1  ]      1 = keep this row's logits
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

from app.engine.errors import InvalidRequest, ModelLoadFailed
from app.engine.llama.native_log import detail, native_errors

_I32P = ctypes.POINTER(ctypes.c_int32)

# llama_ftype → (name as docs/design.md §4 spells it, bits per weight of the dominant type).
FTYPE_NAMES: dict[int, tuple[str, int]] = {
    0: ("f32", 32), 1: ("f16", 16), 2: ("q4_0", 4), 3: ("q4_1", 4), 7: ("q8_0", 8),
    8: ("q5_0", 5), 9: ("q5_1", 5), 10: ("q2_k", 2), 11: ("q3_k_s", 3), 12: ("q3_k_m", 3),
    13: ("q3_k_l", 3), 14: ("q4_k_s", 4), 15: ("q4_k_m", 4), 16: ("q5_k_s", 5),
    17: ("q5_k_m", 5), 18: ("q6_k", 6), 19: ("iq2_xxs", 2), 20: ("iq2_xs", 2),
    21: ("q2_k_s", 2), 22: ("iq3_xs", 3), 23: ("iq3_xxs", 3), 24: ("iq1_s", 1),
    25: ("iq4_nl", 4), 26: ("iq3_s", 3), 27: ("iq3_m", 3), 28: ("iq2_s", 2), 29: ("iq2_m", 2),
    30: ("iq4_xs", 4), 31: ("iq1_m", 1), 32: ("bf16", 16), 36: ("tq1_0", 1), 37: ("tq2_0", 2),
    38: ("mxfp4_moe", 4), 39: ("nvfp4", 4), 40: ("q1_0", 1), 41: ("q2_0", 2),
}

KV_TYPES: dict[str, int] = {
    "f32": llama_cpp.GGML_TYPE_F32, "f16": llama_cpp.GGML_TYPE_F16,
    "bf16": 30,  # GGML_TYPE_BF16 (llama-cpp-python names no constant for it)
    "q8_0": llama_cpp.GGML_TYPE_Q8_0, "q4_0": llama_cpp.GGML_TYPE_Q4_0,
    "q4_1": llama_cpp.GGML_TYPE_Q4_1, "q5_0": llama_cpp.GGML_TYPE_Q5_0,
    "q5_1": llama_cpp.GGML_TYPE_Q5_1,
}

def check_gguf(path: str, what: str, error: type[Exception]) -> None:
    p = Path(path)
    if not p.exists():
        raise error(f"{what} not found: {path}")
    if not p.is_file():
        raise error(f"{what} is not a file: {path}")
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise error(f"{what} is not a GGUF file (bad magic {magic!r}): {path}")


def load_model(path: str, n_gpu_layers: int, *, extra_bufts: bool = True) -> Any:
    """The native model of a GGUF file (``n_gpu_layers`` < 0: all); the caller frees it.
    ``extra_bufts``: llama.cpp's extra buffer types (repacked weights), off where they are not
    exact (app.engine.llama.weight_kernels) or where the crash probe died with them on
    (``LlamaBackend`` decides)."""
    check_gguf(path, "model file", ModelLoadFailed)
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = 999 if n_gpu_layers < 0 else n_gpu_layers
    mparams.use_extra_bufts = extra_bufts
    with native_errors() as errors:
        model = llama_cpp.llama_model_load_from_file(path.encode(), mparams)
    if not model:
        raise ModelLoadFailed(f"llama.cpp could not load {path}{detail(errors)}")
    return model


class Batch:
    """A preallocated ``llama_batch`` over numpy buffers (see the module docstring)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.token = np.zeros(capacity, dtype=np.int32)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.ones(capacity, dtype=np.int32)
        self.seq = np.zeros(capacity, dtype=np.int32)
        self.logits = np.zeros(capacity, dtype=np.int8)
        self.arange = np.arange(capacity, dtype=np.int32)
        base = self.seq.ctypes.data
        self._seq_ptrs = (ctypes.c_void_p * capacity)(*range(base, base + 4 * capacity, 4))
        struct: Any = llama_cpp.llama_batch()
        struct.token = self.token.ctypes.data_as(_I32P)
        struct.embd = ctypes.POINTER(ctypes.c_float)()
        struct.pos = self.pos.ctypes.data_as(_I32P)
        struct.n_seq_id = self.n_seq_id.ctypes.data_as(_I32P)
        struct.seq_id = ctypes.cast(self._seq_ptrs, ctypes.POINTER(_I32P))
        struct.logits = self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))
        self.struct = struct

    def put(self, row: int, tokens: Sequence[int], pos: int, seq_id: int, *, logits: bool = False) -> int:
        """Write a run of tokens of one seq from ``row``, every row's logits ``logits``;
        returns the next row."""
        if len(tokens) == 1:  # a decode row: item writes, not four slice conversions
            self.token[row] = tokens[0]
            self.pos[row] = pos
            self.seq[row] = seq_id
            self.logits[row] = logits
            return row + 1
        end = row + len(tokens)
        self.token[row:end] = tokens
        self.pos[row:end] = self.arange[: end - row] + pos
        self.seq[row:end] = seq_id
        self.logits[row:end] = logits
        return end


class LoraAdapter:
    """A loaded LoRA adapter. Freed by ``LlamaBackend.free_adapter`` (or with the model)."""

    def __init__(self, ptr: Any, path: str, sha256: bytes) -> None:
        self._ptr: Any = ptr
        self.path = path
        self.sha256 = sha256

    @property
    def ptr(self) -> Any:
        if self._ptr is None:
            raise InvalidRequest(f"adapter {self.path} was unloaded")
        return self._ptr

    @property
    def is_closed(self) -> bool:
        return self._ptr is None

    def close(self) -> None:
        if self._ptr is not None:
            llama_cpp.llama_adapter_lora_free(self._ptr)
            self._ptr = None

    def __repr__(self) -> str:
        return f"LoraAdapter({self.path!r})"


def ctx_params(
    *, n_ctx: int, n_seq_max: int, n_batch: int, n_ubatch: int, n_threads: int,
    n_threads_batch: int | None = None, flash_attn: bool, type_k: int, type_v: int, kv_unified: bool = False, swa_full: bool = True,
    embeddings: bool = False,
) -> Any:
    p = llama_cpp.llama_context_default_params()
    p.n_ctx = n_ctx
    p.n_batch = n_batch
    p.n_ubatch = n_ubatch
    p.n_seq_max = n_seq_max
    p.n_threads = n_threads
    p.n_threads_batch = n_threads_batch or n_threads
    p.flash_attn_type = (
        llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    p.type_k = type_k
    p.type_v = type_v
    p.kv_unified = kv_unified
    p.swa_full = swa_full  # in ctx_params_hash: without it, a restored state's logits differ
    p.no_perf = True
    p.embeddings = embeddings
    if embeddings:
        p.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_MEAN
    return p
