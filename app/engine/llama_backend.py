"""The llama.cpp backend: one model, one multi-sequence context, one ``llama_decode`` per tick.

Owns every native handle of a loaded model (model, context, lazily an embeddings context,
LoRA adapters) and implements ``app.engine.backend.Backend`` on llama-cpp-python's low-level
bindings. Only the scheduler thread calls it. Its neighbours: ``llama_handles`` (the batch
buffers, adapter handles, context parameters), ``native_log`` (llama.cpp's log bridge) and
``chat_template`` (the sandboxed template renderer).

The tick batch is a preallocated ``Batch`` (``app.engine.llama_handles``). After a decode,
``_rows[seq_id]`` is the row holding that seq's newest logits; the next ``sample`` samples
every ``DecodeOp`` from it, and the ``decode`` after it overwrites the batch.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, cast

import jinja2
import llama_cpp
import numpy as np

from app.cache import seqstate
from app.cache.keys import file_sha256
from app.engine.backend import (
    BackendInfo,
    DecodeOp,
    Op,
    Prefilled,
    PrefillOp,
    Sampled,
    SamplingParams,
    StepResult,
)
from app.engine.chat_template import CHATML_TEMPLATE, render_chat_template
from app.engine.errors import (
    AdapterLoadFailed,
    ContextOverflow,
    DecodeFailed,
    EngineError,
    InvalidRequest,
    ModelLoadFailed,
    NBatchTooSmall,
    NotSupported,
)
from app.engine.llama_handles import (
    FTYPE_NAMES,
    KV_TYPES,
    Batch,
    LoraAdapter,
    check_gguf,
    ctx_params,
)
from app.engine.native_log import detail, init_llama, native_errors
from app.engine.sampling import SamplerChain, build_chain

log = logging.getLogger(__name__)

_PREFILLED = Prefilled()

# The embeddings context holds one sequence of at most this many tokens in one ubatch.
EMBED_MAX_TOKENS = 2048



# --------------------------------------------------------------------------- the backend


class LlamaBackend:
    """``Backend`` on llama.cpp. See ``app.engine.backend`` for the contract."""

    def __init__(
        self,
        path: str,
        *,
        n_ctx_per_seq: int,
        n_seq_max: int,
        n_batch: int,
        n_gpu_layers: int = 0,
        n_threads: int | None = None,
        flash_attn: bool = True,
        type_k: str = "q8_0",
        type_v: str = "q8_0",
        kv_unified: bool = False,
        fingerprint_of: Callable[[str], bytes] = file_sha256,
    ) -> None:
        """``fingerprint_of(path)`` gives the file's sha256; the engine passes its
        remembered-by-(path, size, mtime) lookup so a big model is hashed once."""
        if min(n_ctx_per_seq, n_seq_max, n_batch) < 1:
            raise ValueError("n_ctx_per_seq, n_seq_max and n_batch must be >= 1")
        if type_k not in KV_TYPES or type_v not in KV_TYPES:
            raise ValueError(f"type_k/type_v must be one of {', '.join(KV_TYPES)}")
        if type_v not in ("f16", "f32") and not flash_attn:
            raise InvalidRequest(f"a quantized V cache (type_v={type_v}) needs flash_attn=True")
        init_llama()
        self.path = str(path)
        self.n_ctx_per_seq = n_ctx_per_seq
        self.n_seq_max = n_seq_max
        self.n_batch = n_batch
        self.n_threads = n_threads or max(1, min(os.cpu_count() or 1, 8))
        self._flash_attn = flash_attn
        self._kv_unified = kv_unified
        # llama.cpp gives each sequence a KV stream of its own unless the KV is unified.
        self.n_stream = 1 if kv_unified else n_seq_max
        self.type_k, self.type_v = type_k, type_v
        self._stack = ExitStack()
        self._closed = False
        self._embed_ctx: Any = None
        self._embed_batch: Batch | None = None
        self._adapters: list[LoraAdapter] = []
        self._active: list[tuple[LoraAdapter, float]] = []
        self._eog: dict[int, bool] = {}
        self._rows: dict[int, int] = {}
        self._template_cache: dict[str, jinja2.Template] = {}
        try:
            self._load(n_gpu_layers)
            self.info = self._read_info(fingerprint_of(self.path), self.type_k, self.type_v, n_gpu_layers)
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------- load / close

    def _load(self, n_gpu_layers: int) -> None:
        check_gguf(self.path, "model file", ModelLoadFailed)
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = 999 if n_gpu_layers < 0 else n_gpu_layers
        with native_errors() as errors:
            model = llama_cpp.llama_model_load_from_file(self.path.encode(), mparams)
        if not model:
            raise ModelLoadFailed(f"llama.cpp could not load {self.path}{detail(errors)}")
        self._model = model
        self._stack.callback(llama_cpp.llama_model_free, model)
        # Adapters die before the model (llama.cpp would free them with it otherwise).
        self._stack.callback(self._free_all_adapters)
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        self._n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self._n_embd = llama_cpp.llama_model_n_embd(model)
        self._logits_row_type: Any = ctypes.c_float * int(self._n_vocab)
        with native_errors() as errors:
            ctx = self._new_context()
        if not ctx and (self.type_k, self.type_v) != ("f16", "f16"):
            # NOTE: a quantized KV cache needs head sizes that are multiples of its block
            # (32 for q8_0); such a model gets an f16 cache instead of failing to load.
            log.warning("%s: no %s/%s KV cache for this model%s; using f16", self.path, self.type_k, self.type_v, detail(errors))
            self.type_k = self.type_v = "f16"
            with native_errors() as errors:
                ctx = self._new_context()
        if not ctx:
            raise ModelLoadFailed(f"llama.cpp could not create a context for {self.path}{detail(errors)}")
        self._ctx = ctx
        self._stack.callback(llama_cpp.llama_free, ctx)
        self._mem = llama_cpp.llama_get_memory(ctx)
        self._batch = Batch(self.n_batch)

    def _new_context(self, *, n_ctx: int | None = None, n_seq_max: int | None = None, embeddings: bool = False) -> Any:
        """A context of this model with this backend's KV settings (NULL when refused)."""
        n_seq = n_seq_max or self.n_seq_max
        n = n_ctx or self.n_ctx_per_seq * n_seq
        cparams = ctx_params(
            n_ctx=n, n_seq_max=n_seq,
            n_batch=n if embeddings else self.n_batch,
            n_ubatch=n if embeddings else min(self.n_batch, 512),
            n_threads=self.n_threads, flash_attn=self._flash_attn,
            type_k=KV_TYPES[self.type_k], type_v=KV_TYPES[self.type_v],
            kv_unified=self._kv_unified, embeddings=embeddings,
        )
        return llama_cpp.llama_init_from_model(self._model, cparams)

    def close(self) -> None:
        """Free every native handle: contexts, then adapters, then the model. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._rows.clear()
        self._stack.close()

    def __enter__(self) -> LlamaBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _free_all_adapters(self) -> None:
        for adapter in self._adapters:
            adapter.close()
        self._adapters.clear()
        self._active.clear()

    # ----------------------------------------------------------------- metadata

    def _meta(self, key: str) -> str | None:
        size = 256
        while True:
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, size)
            if n < 0:
                return None
            if n < size:
                return buf.value.decode("utf-8", "replace")
            size = n + 1

    def _read_info(self, fingerprint: bytes, type_k: str, type_v: str, n_gpu_layers: int) -> BackendInfo:
        ftype_text = self._meta("general.file_type")
        ftype = int(ftype_text) if ftype_text and ftype_text.isdigit() else -1
        quant_type, quant_bits = FTYPE_NAMES.get(ftype, ("unknown", 0))
        size_b = int(llama_cpp.llama_model_size(self._model))
        n_layer = int(llama_cpp.llama_model_n_layer(self._model))
        if n_gpu_layers == 0:
            vram = 0
        else:
            vram = size_b if n_gpu_layers < 0 else size_b * min(n_gpu_layers, n_layer) // max(n_layer, 1)
        bos = llama_cpp.llama_vocab_bos(self._vocab)
        eos = llama_cpp.llama_vocab_eos(self._vocab)
        return BackendInfo(
            name=self._meta("general.name") or Path(self.path).stem,
            n_ctx_train=int(llama_cpp.llama_model_n_ctx_train(self._model)),
            n_vocab=int(self._n_vocab),
            quant_type=quant_type,
            quant_bits=quant_bits,
            fingerprint=fingerprint,
            ctx_params_hash=self.ctx_params_hash(type_k, type_v, self._flash_attn, self._kv_unified),
            chat_template=self._meta("tokenizer.chat_template"),
            bos_token=self.token_piece(bos).decode("utf-8", "replace") if bos >= 0 else "",
            eos_token=self.token_piece(eos).decode("utf-8", "replace") if eos >= 0 else "",
            vram_estimate_b=vram,
            extra={
                "architecture": self._meta("general.architecture") or "",
                "n_embd": int(self._n_embd),
                "n_layer": n_layer,
                "n_params": int(llama_cpp.llama_model_n_params(self._model)),
                "size_b": size_b,
                "ftype": ftype,
                "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(self._vocab)),
                "n_ctx_per_seq": self.n_ctx_per_seq,
                "n_seq_max": self.n_seq_max,
                "n_batch": self.n_batch,
            },
        )

    @staticmethod
    def ctx_params_hash(type_k: str, type_v: str, flash_attn: bool, kv_unified: bool = False) -> bytes:
        """sha256 of the context settings that change KV contents or the state format.

        Left out on purpose: n_seq_max (payloads are stored as one-stream states, see
        ``kv_pack``), n_ctx, n_batch/n_ubatch, threads. RoPE settings are always "from the
        model" here (0 / -1 = the GGUF's own values). ``kv_unified`` is in: a unified buffer
        can hold a sequence's cells out of position order, which changes its logits, so KV
        computed that way is not what a per-stream context would compute.
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
            "swa_full": True,
        }
        blob = json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).digest()

    # ----------------------------------------------------------------- the tick

    def sample(self, ops: Sequence[Op]) -> list[StepResult]:
        """First half of a tick: check ``ops``, then sample every decode row from the logits
        of the previous ``decode`` (the scheduler streams the tokens before ``decode`` runs).

        Raises before touching any sampler for a malformed tick (``NBatchTooSmall``,
        ``ContextOverflow``, ``InvalidRequest``); an error about one op carries its ``seq_id``.
        """
        if not ops:
            return []
        self._check_ops(ops)
        ctx, rows = self._ctx, self._rows
        sample, argmax, is_eog = llama_cpp.llama_sampler_sample, self._argmax, self.is_eog
        results: list[StepResult] = []
        for op in ops:
            if type(op) is DecodeOp:
                smpl = op.sampler
                if op.greedy or smpl is None or smpl.is_plain_greedy:
                    token = argmax(rows[op.seq_id])
                else:
                    token = sample(smpl.ptr, ctx, rows[op.seq_id])
                results.append(Sampled(token, is_eog(token)))
            else:
                results.append(_PREFILLED)
        return results

    def decode(self, ops: Sequence[Op], sampled: Sequence[StepResult]) -> None:
        """Second half of a tick: the prefill slices and the sampled tokens in ONE ``llama_decode``.

        ``DecodeFailed`` leaves the seqs of the tick unusable (their samplers advanced, and
        their KV may hold part of the batch): fail their requests and free their seqs.
        """
        if not ops:
            return
        if len(sampled) != len(ops):
            raise ValueError(f"{len(sampled)} sampled results for {len(ops)} ops")
        batch = self._batch
        new_rows: dict[int, int] = {}
        row = 0
        for op, res in zip(ops, sampled, strict=True):
            if type(op) is DecodeOp:
                batch.token[row] = cast(Sampled, res).token
                batch.pos[row] = op.pos
                batch.seq[row] = op.seq_id
                batch.logits[row] = 1
                new_rows[op.seq_id] = row
                row += 1
            else:
                prefill = cast(PrefillOp, op)
                if prefill.tokens:
                    row = batch.put(row, prefill.tokens, prefill.pos, prefill.seq_id)
                    if prefill.want_logits:
                        batch.logits[row - 1] = 1
                        new_rows[prefill.seq_id] = row - 1
        self._decode(self._ctx, batch, row)
        self._rows = new_rows

    def step(self, ops: Sequence[Op]) -> list[StepResult]:
        """``sample`` then ``decode``: a whole tick at once (tests and tools)."""
        results = self.sample(ops)
        self.decode(ops, results)
        return results

    def _check_ops(self, ops: Sequence[Op]) -> None:
        """Validate a tick before any sampler state changes; a refused op's seq id goes on the error."""
        n_tokens = 0
        limit = self.n_ctx_per_seq
        for op in ops:
            try:
                self._check_seq(op.seq_id)
                if type(op) is DecodeOp:
                    if op.seq_id not in self._rows:
                        raise RuntimeError(f"seq {op.seq_id} has no logits from the previous tick")
                    end = op.pos + 1
                    n_tokens += 1
                elif isinstance(op, PrefillOp):
                    self._check_tokens(op.tokens)
                    end = op.pos + len(op.tokens)
                    n_tokens += len(op.tokens)
                else:
                    raise TypeError(f"not a tick op: {op!r}")
                if end > limit:
                    raise ContextOverflow(f"seq {op.seq_id}: position {end - 1} is past n_ctx {limit}")
            except EngineError as exc:
                exc.seq_id = op.seq_id
                raise
        if n_tokens > self._batch.capacity:
            raise NBatchTooSmall(f"a tick of {n_tokens} tokens exceeds n_batch={self._batch.capacity}")

    def _check_seq(self, seq_id: int) -> None:
        """llama.cpp aborts the process on an out-of-range seq id; refuse it here instead."""
        if not 0 <= seq_id < self.n_seq_max:
            raise InvalidRequest(f"seq id {seq_id} is outside 0..{self.n_seq_max - 1}")

    def _check_tokens(self, tokens: Sequence[int]) -> None:
        """Out-of-vocabulary ids crash some llama.cpp entry points; refuse them up front."""
        if tokens and (min(tokens) < 0 or max(tokens) >= self._n_vocab):
            bad = next(t for t in tokens if not 0 <= t < self._n_vocab)
            raise InvalidRequest(f"token id {bad} is outside the vocabulary (0..{self._n_vocab - 1})")

    def _argmax(self, row: int) -> int:
        """Greedy choice from one output row of the main context.

        NOTE: numpy's argmax over the logits (~10 µs) instead of a greedy llama_sampler (which
        builds a candidate array over the whole vocabulary, ~100 µs); both pick the first
        maximum, so the tokens are identical.
        """
        return int(self._logits_view(row).argmax())

    def seq_logits(self, seq_id: int) -> np.ndarray[Any, np.dtype[np.float32]]:
        """A copy of the logits the seq's next decode row will sample from (tests, debugging)."""
        row = self._rows.get(seq_id)
        if row is None:
            raise InvalidRequest(f"seq {seq_id} has no logits from the previous tick")
        return self._logits_view(row).copy()

    def _logits_view(self, row: int) -> np.ndarray[Any, np.dtype[np.float32]]:
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, row)
        address = ctypes.cast(ptr, ctypes.c_void_p).value
        if not address:
            raise RuntimeError(f"llama.cpp has no logits for batch row {row}")
        return np.frombuffer(self._logits_row_type.from_address(address), dtype=np.float32)

    def _decode(self, ctx: Any, batch: Batch, n_tokens: int) -> None:
        self._rows = {}
        batch.struct.n_tokens = n_tokens
        rc = llama_cpp.llama_decode(ctx, batch.struct)
        if rc != 0:
            raise DecodeFailed(int(rc))

    # ----------------------------------------------------------------- samplers

    def new_sampler(self, params: SamplingParams) -> SamplerChain:
        return build_chain(self._vocab, params)

    def free_sampler(self, sampler: Any) -> None:
        if isinstance(sampler, SamplerChain):
            sampler.close()

    def accept(self, sampler: Any, token: int) -> None:
        if isinstance(sampler, SamplerChain):
            sampler.accept(token)

    # ----------------------------------------------------------------- KV

    def seq_rm(self, seq_id: int, start: int = 0) -> None:
        self._check_seq(seq_id)
        if not llama_cpp.llama_memory_seq_rm(self._mem, seq_id, start, -1):
            raise NotSupported(f"llama.cpp cannot remove positions >= {start} of seq {seq_id}")
        if start <= 0:
            self._rows.pop(seq_id, None)

    def seq_cp(self, src: int, dst: int, n_tokens: int) -> None:
        """Give ``dst`` a copy of ``src``'s positions ``0 .. n_tokens-1``.

        NOTE: with one KV stream per sequence, llama.cpp's ``llama_memory_seq_cp`` copies only
        whole streams (a partial range aborts the process: "only supported for full KV
        buffers"), so the head is packed, cut to ``n_tokens`` cells and loaded into ``dst``.
        With a unified buffer the cells are shared instead (no compute, no memory).
        """
        self._check_seq(src)
        self._check_seq(dst)
        if src == dst:
            raise InvalidRequest("seq_cp needs two different sequences")
        if self._kv_unified:
            llama_cpp.llama_memory_seq_cp(self._mem, src, dst, 0, n_tokens)
            return
        try:
            head = seqstate.cut(self.kv_pack(src), n_tokens)
        except (seqstate.UnknownLayout, ValueError) as exc:
            raise NotSupported(f"cannot copy the first {n_tokens} cells of seq {src}: {exc}") from exc
        if not self.kv_unpack(dst, head):
            raise NotSupported(f"llama.cpp refused the first {n_tokens} cells of seq {src}")

    def seq_pos_max(self, seq_id: int) -> int:
        """Largest position held by the seq, -1 when empty (handy for invariant checks)."""
        self._check_seq(seq_id)
        return int(llama_cpp.llama_memory_seq_pos_max(self._mem, seq_id))

    def kv_pack(self, seq_id: int) -> bytes | memoryview:
        """The seq's KV as a one-stream state (``app.cache.seqstate``), loadable under any
        ``n_seq_max``; empty when the seq holds nothing.

        A layout ``seqstate`` does not recognise (recurrent or sliding-window memory) is
        returned as llama.cpp wrote it; it then loads only into a context with the same
        stream count (llama.cpp refuses it otherwise, and a refused payload is a miss).
        """
        self._check_seq(seq_id)
        size = llama_cpp.llama_state_seq_get_size(self._ctx, seq_id)
        if size == 0:
            return b""
        # NOTE: llama.cpp writes straight into a new bytes object. It runs on the scheduler
        # thread between ticks, and for a 14 MB state this takes 1.6 ms where a bytearray
        # plus a copy to bytes took 11 ms (page faults and two passes over fresh memory).
        # Safe because the object is brand new (``bytes(n)`` for n > 0 is never shared or
        # cached), nothing else holds it, and nothing hashes or reads it before it is filled.
        out = bytes(size)
        dst = ctypes.cast(ctypes.c_char_p(out), ctypes.POINTER(ctypes.c_uint8))
        n = llama_cpp.llama_state_seq_get_data(self._ctx, dst, size, seq_id)
        view = memoryview(out)[:n]
        try:
            st = seqstate.parse(view)
        except seqstate.UnknownLayout as exc:
            log.debug("seq state layout not recognised (%s); stored as written", exc)
            return view
        if st.n_stream == 1:
            return view
        # NOTE: the one-stream form without a copy (a 46 MB copy of fresh memory took
        # 40-60 ms here): the stream's block is already contiguous, so the one-stream header
        # is written over the bytes just before it and the payload is a view of the rest.
        start, end = seqstate.one_stream_span(st)
        ctypes.memmove(ctypes.addressof(dst.contents) + start, seqstate.header(st.seq_id, 1), seqstate.HEADER.size)
        return view[start:end]

    def kv_unpack(self, seq_id: int, payload: bytes | memoryview) -> bool:
        """Load a packed seq state (one-stream, or as written by this context's layout).
        False, never an exception, when it cannot be loaded."""
        self.seq_rm(seq_id)
        if not payload:
            return False
        data: seqstate.Buffer = payload
        if self.n_stream > 1:
            # A layout seqstate does not know is loaded as stored; llama.cpp checks it.
            with contextlib.suppress(seqstate.UnknownLayout):
                data = seqstate.to_streams(payload, self.n_stream)
        buf = np.frombuffer(data, dtype=np.uint8)
        src = buf.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        with native_errors() as errors:
            n = llama_cpp.llama_state_seq_set_data(self._ctx, src, len(buf), seq_id)
        if n == 0:
            log.info("seq state refused by llama.cpp%s", detail(errors))
            llama_cpp.llama_memory_seq_rm(self._mem, seq_id, -1, -1)
            return False
        return True

    # ----------------------------------------------------------------- vocabulary

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        size = len(data) + 8
        while True:
            buf = (llama_cpp.llama_token * size)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, size, add_special, parse_special)
            if n >= 0:
                return list(buf[:n])
            size = -n

    def detokenize(self, tokens: Sequence[int]) -> str:
        if not tokens:
            return ""
        self._check_tokens(tokens)
        arr = (llama_cpp.llama_token * len(tokens))(*tokens)
        size = len(tokens) * 8 + 16
        while True:
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_detokenize(self._vocab, arr, len(tokens), buf, size, False, True)
            if n >= 0:
                return buf.raw[:n].decode("utf-8", "replace")
            size = -n

    def token_piece(self, token: int) -> bytes:
        if not 0 <= token < self._n_vocab:
            self._check_tokens([token])
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, 64, 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, -n, 0, True)
        return buf.raw[:n]

    def is_eog(self, token: int) -> bool:
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[token] = bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))
        return eog

    # ----------------------------------------------------------------- chat template

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, tools: list[Any] | None = None
    ) -> str:
        source = self.info.chat_template or CHATML_TEMPLATE
        return render_chat_template(
            source, messages, bos_token=self.info.bos_token, eos_token=self.info.eos_token,
            add_generation_prompt=add_generation_prompt, tools=tools, cache=self._template_cache,
        )

    # ----------------------------------------------------------------- embeddings

    def embed(self, tokens: Sequence[int]) -> list[float]:
        """Mean-pooled embedding of ``tokens`` (``n_embd`` floats), from a second context."""
        if not tokens:
            raise InvalidRequest("embed needs at least one token")
        self._check_tokens(tokens)
        ctx, batch = self._embedding_context()
        if len(tokens) > batch.capacity:
            raise ContextOverflow(f"embed takes at most {batch.capacity} tokens, got {len(tokens)}")
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
        end = batch.put(0, tokens, 0, 0)
        batch.logits[:end] = 1
        batch.struct.n_tokens = end
        rc = llama_cpp.llama_decode(ctx, batch.struct)
        if rc != 0:
            raise DecodeFailed(int(rc))
        ptr = llama_cpp.llama_get_embeddings_seq(ctx, 0)
        if not ptr:
            raise NotSupported("this model produced no pooled embedding")
        return [float(x) for x in ptr[: self._n_embd]]

    def _embedding_context(self) -> tuple[Any, Batch]:
        if self._embed_ctx is None:
            n = min(self.n_ctx_per_seq, EMBED_MAX_TOKENS)
            ctx = self._new_context(n_ctx=n, n_seq_max=1, embeddings=True)
            if not ctx:
                raise NotSupported("llama.cpp could not create an embeddings context")
            self._stack.callback(llama_cpp.llama_free, ctx)
            self._embed_ctx, self._embed_batch = ctx, Batch(n)
            self._apply_adapters(ctx, self._active)
        assert self._embed_batch is not None
        return self._embed_ctx, self._embed_batch

    # ----------------------------------------------------------------- LoRA

    def load_adapter(self, path: str) -> LoraAdapter:
        path = str(path)
        check_gguf(path, "adapter file", AdapterLoadFailed)
        with native_errors() as errors:
            ptr = llama_cpp.llama_adapter_lora_init(self._model, path.encode())
        if not ptr:
            raise AdapterLoadFailed(f"llama.cpp refused adapter {path}{detail(errors)}")
        adapter = LoraAdapter(ptr, path, file_sha256(path))
        self._adapters.append(adapter)
        return adapter

    def set_adapters(self, adapters: Sequence[tuple[Any, float]]) -> None:
        """Apply exactly this set of (adapter, scale) to every context of the model."""
        active = [(a, float(s)) for a, s in adapters]
        for adapter, _ in active:
            if not isinstance(adapter, LoraAdapter) or adapter not in self._adapters:
                raise InvalidRequest(f"unknown or unloaded adapter: {adapter!r}")
        self._apply_adapters(self._ctx, active)
        if self._embed_ctx is not None:
            self._apply_adapters(self._embed_ctx, active)
        self._active = active

    def _apply_adapters(self, ctx: Any, active: Sequence[tuple[LoraAdapter, float]]) -> None:
        n = len(active)
        ptrs = (llama_cpp.llama_adapter_lora_p_ctypes * max(n, 1))(*[a.ptr for a, _ in active])
        scales = (ctypes.c_float * max(n, 1))(*[s for _, s in active])
        rc = llama_cpp.llama_set_adapters_lora(ctx, ptrs if n else None, n, scales if n else None)
        if rc != 0:
            raise AdapterLoadFailed(f"llama.cpp could not apply the adapters (rc={rc})")

    def free_adapter(self, adapter: Any) -> None:
        """Detach (if active) and free an adapter. Idempotent."""
        if not isinstance(adapter, LoraAdapter) or adapter not in self._adapters:
            return
        if any(a is adapter for a, _ in self._active):
            self.set_adapters([(a, s) for a, s in self._active if a is not adapter])
        self._adapters.remove(adapter)
        adapter.close()

    # ----------------------------------------------------------------- speculative verify

    def verify(self, seq_id: int, prefix: Sequence[int], candidates: Sequence[int]) -> tuple[int, int | None]:
        """Greedy check of draft ``candidates`` after ``prefix``; leaves the seq empty.

        Returns (number of leading candidates equal to the model's argmax, the argmax token
        after them or None when it is end-of-generation).
        """
        if not prefix:
            raise InvalidRequest("verify needs a non-empty prefix")
        tokens = list(prefix) + list(candidates)
        self._check_tokens(tokens)
        if len(tokens) > self.n_ctx_per_seq:
            raise ContextOverflow(f"verify needs {len(tokens)} tokens, n_ctx is {self.n_ctx_per_seq}")
        first = len(prefix) - 1  # the row whose logits predict candidates[0]
        argmax: list[int] = []
        self.seq_rm(seq_id)
        try:
            for start in range(0, len(tokens), self.n_batch):
                chunk = tokens[start : start + self.n_batch]
                end = self._batch.put(0, chunk, start, seq_id)
                lo = max(first - start, 0)
                self._batch.logits[lo:end] = 1 if lo < end else 0
                self._decode(self._ctx, self._batch, end)
                argmax.extend(self._argmax(row) for row in range(lo, end))
        finally:
            self._rows = {}
            self.seq_rm(seq_id)
        accepted = 0
        while accepted < len(candidates) and candidates[accepted] == argmax[accepted]:
            accepted += 1
        following = argmax[accepted]
        return accepted, None if self.is_eog(following) else following
