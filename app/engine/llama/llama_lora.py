"""A model's LoRA adapters on the native side: loaded handles and the set applied to its contexts.

``AdapterSet`` owns every ``LoraAdapter`` loaded for one model and the (adapter, scale) set
currently applied; ``LlamaBackend`` applies that set to each of its contexts (the main one and,
once made, the embeddings one). The engine-side view (handles, hashes, the effective
fingerprint) is ``app.engine.lora``. Only the scheduler thread calls it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import llama_cpp

from app.cache.keys import file_sha256
from app.engine.errors import AdapterLoadFailed, InvalidRequest
from app.engine.llama.llama_handles import LoraAdapter, check_gguf
from app.engine.llama.native_log import detail, native_errors


def apply_adapters(ctx: Any, active: Sequence[tuple[LoraAdapter, float]]) -> None:
    """Make ``active`` the exact adapter set of ``ctx``."""
    n = len(active)
    ptrs = (llama_cpp.llama_adapter_lora_p_ctypes * max(n, 1))(*[a.ptr for a, _ in active])
    scales = (ctypes.c_float * max(n, 1))(*[s for _, s in active])
    rc = llama_cpp.llama_set_adapters_lora(ctx, ptrs if n else None, n, scales if n else None)
    if rc != 0:
        raise AdapterLoadFailed(f"llama.cpp could not apply the adapters (rc={rc})")


class AdapterSet:
    def __init__(self, model: Any) -> None:
        self._model = model
        self.loaded: list[LoraAdapter] = []
        self.active: list[tuple[LoraAdapter, float]] = []

    def load(self, path: str) -> LoraAdapter:
        check_gguf(path, "adapter file", AdapterLoadFailed)
        with native_errors() as errors:
            ptr = llama_cpp.llama_adapter_lora_init(self._model, path.encode())
        if not ptr:
            raise AdapterLoadFailed(f"llama.cpp refused adapter {path}{detail(errors)}")
        adapter = LoraAdapter(ptr, path, file_sha256(path))
        self.loaded.append(adapter)
        return adapter

    def set(self, adapters: Sequence[tuple[Any, float]], contexts: Sequence[Any]) -> None:
        """Apply exactly this set of (adapter, scale) to every one of ``contexts``."""
        active = [(a, float(s)) for a, s in adapters]
        for adapter, _ in active:
            if not isinstance(adapter, LoraAdapter) or adapter not in self.loaded:
                raise InvalidRequest(f"unknown or unloaded adapter: {adapter!r}")
        for ctx in contexts:
            apply_adapters(ctx, active)
        self.active = active

    def free(self, adapter: Any, contexts: Sequence[Any]) -> None:
        """Detach (if active) and free an adapter. Idempotent."""
        if not isinstance(adapter, LoraAdapter) or adapter not in self.loaded:
            return
        if any(a is adapter for a, _ in self.active):
            self.set([(a, s) for a, s in self.active if a is not adapter], contexts)
        self.loaded.remove(adapter)
        adapter.close()

    def free_all(self) -> None:
        for adapter in self.loaded:
            adapter.close()
        self.loaded.clear()
        self.active.clear()
