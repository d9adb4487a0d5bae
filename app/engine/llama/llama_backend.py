"""The llama.cpp backend: one model, one multi-sequence context, one ``llama_decode`` per tick.

Owns every native handle of a loaded model (model, context, lazily an embeddings context,
LoRA adapters) and implements ``app.engine.backend.Backend`` on llama-cpp-python's low-level
bindings. Only the scheduler thread calls it. This module owns loading, the tick (``sample`` /
``decode``) and speculative ``verify``; its neighbours own the rest: ``llama_handles`` (the
batch buffers, adapter handles, context parameters), ``llama_info`` (metadata, the context
hash), ``llama_kv`` (seq state pack / unpack), ``llama_vocab`` (tokens ↔ text),
``llama_lora`` (adapters on the native side), ``llama_embed`` (embeddings), ``native_log``
(llama.cpp's log bridge) and ``chat_template`` (the sandboxed template renderer).

The tick batch is a preallocated ``Batch`` (``app.engine.llama.llama_handles``). After a decode,
``_rows[seq_id]`` is the row holding that seq's newest logits; the next ``sample`` samples
every ``DecodeOp`` from it, and the ``decode`` after it overwrites the batch. A seq whose
decode pushed drafts (``_drafted[seq_id]``: the first draft's position and the drafts) has
their rows right after that one; ``sample`` verifies them (``app.engine.speculation``).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any, cast

import llama_cpp
import numpy as np

from app.cache.keys import file_sha256
from app.engine.backend import (
    DecodeOp,
    Op,
    Prefilled,
    PrefillOp,
    Sampled,
    SamplingParams,
    StepResult,
)
from app.engine.chat_template import CHATML_TEMPLATE, render_chat_template
from app.engine.chat_template import prewarm as prewarm_templates
from app.engine.config import DEFAULT_TYPE_K, DEFAULT_TYPE_V, default_threads
from app.engine.errors import (
    DecodeFailed,
    InvalidRequest,
    ModelLoadFailed,
)
from app.engine.grammar.check import check_grammar
from app.engine.llama import native_probe, weight_kernels
from app.engine.llama.llama_checks import TickChecks
from app.engine.llama.llama_embed import Embeddings
from app.engine.llama.llama_handles import (
    KV_TYPES,
    Batch,
    LoraAdapter,
    check_gguf,
    ctx_params,
    load_model,
)
from app.engine.llama.llama_info import ctx_params_hash, quant_heads_fit, read_info
from app.engine.llama.llama_kv import SeqKv, memory_caps
from app.engine.llama.llama_lora import AdapterSet
from app.engine.llama.llama_vocab import Vocab
from app.engine.llama.native_log import detail, init_llama, native_errors
from app.engine.llama.sampling import SamplerChain, build_chain
from app.engine.speculation.lookup import verify

log = logging.getLogger(__name__)

_PREFILLED = Prefilled()

_logits_ith_address = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)(
    cast(int, ctypes.cast(llama_cpp.llama_get_logits_ith, ctypes.c_void_p).value)
)
"""``llama_get_logits_ith`` returning the address as an int (None for NULL): the bindings' version
returns a ``POINTER(c_float)`` that each sampled row then had to ``ctypes.cast``."""


class LlamaBackend(SeqKv, TickChecks, Embeddings):
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
        n_threads_batch: int | None = None,
        n_threads_background: int | None = None,
        n_ubatch: int | None = None,
        flash_attn: bool = True,
        type_k: str = DEFAULT_TYPE_K,
        type_v: str = DEFAULT_TYPE_V,
        kv_unified: bool = False,
        swa_full: bool = True,
        kv_choice: str | None = None,
        fingerprint_of: Callable[[str], bytes] = file_sha256,
    ) -> None:
        """``fingerprint_of(path)`` gives the file's sha256; the engine passes its
        remembered-by-(path, size, mtime) lookup so a big model is hashed once.
        ``n_threads_batch`` (llama.cpp's threads for ubatches of more than one token) defaults
        to ``n_threads``; ``n_threads_background`` (a tick that only reads ahead:
        ``decode(background=True)``) to every core (up to 8) and at least ``n_threads_batch``;
        ``n_ubatch`` to ``min(n_batch, 512)``; ``kv_choice``: why these cell types, in words
        (``app.engine.llama.kv_calibration``), reported in ``info.extra``."""
        if min(n_ctx_per_seq, n_seq_max, n_batch) < 1:
            raise ValueError("n_ctx_per_seq, n_seq_max and n_batch must be >= 1")
        if n_ubatch is not None and not 1 <= n_ubatch <= n_batch:
            raise ValueError(f"n_ubatch must be in 1..n_batch ({n_batch}), got {n_ubatch}")
        if type_k not in KV_TYPES or type_v not in KV_TYPES:
            raise ValueError(f"type_k/type_v must be one of {', '.join(KV_TYPES)}")
        if type_v not in ("f16", "bf16", "f32") and not flash_attn:
            raise InvalidRequest(f"a quantized V cache (type_v={type_v}) needs flash_attn=True")
        init_llama()
        self.path = str(path)
        self.n_ctx_per_seq = n_ctx_per_seq
        self.n_seq_max = n_seq_max
        self.n_batch = n_batch
        cores = default_threads()
        self.n_threads = n_threads or cores
        self.n_threads_batch = n_threads_batch or self.n_threads
        self.n_threads_background = n_threads_background or max(cores, self.n_threads_batch)
        safe = native_probe.active()
        check_gguf(self.path, "model file", ModelLoadFailed)
        self.kernels = weight_kernels.choose(self.path)
        self._extra_bufts = safe.use_extra_bufts and self.kernels.extra_bufts
        if safe.max_threads is not None:  # the probe found more threads crash here
            self.n_threads, self.n_threads_batch, self.n_threads_background = (
                min(n, safe.max_threads) for n in (self.n_threads, self.n_threads_batch, self.n_threads_background)
            )
        self._threads = (self.n_threads, self.n_threads_batch)
        """The main context's (n_threads, n_threads_batch) now (``_use_threads``)."""
        self.n_ubatch = n_ubatch or min(n_batch, 512)
        self._flash_attn = flash_attn
        self._kv_unified = kv_unified
        self._swa_full = swa_full
        # llama.cpp gives each sequence a KV stream of its own unless the KV is unified.
        self.n_stream = 1 if kv_unified else n_seq_max
        self.type_k, self.type_v = type_k, type_v
        self._stack = ExitStack()
        self._closed = False
        self._embed_ctx: Any = None
        self._embed_batch: Batch | None = None
        self._rows: dict[int, int] = {}
        self._drafted: dict[int, tuple[int, tuple[int, ...]]] = {}
        prewarm_templates()  # a worker ready before the first render (app.engine.chat_template)
        try:
            self._load(n_gpu_layers)
            self.info = read_info(
                self._model, path=self.path, fingerprint=fingerprint_of(self.path),
                ctx_hash=ctx_params_hash(
                    self.type_k, self.type_v, flash_attn, kv_unified, swa_full, self._extra_bufts,
                    kernels=self.kernels.cache_key(),
                ),
                n_gpu_layers=n_gpu_layers, token_piece=self.token_piece,
                extra={"n_ctx_per_seq": n_ctx_per_seq, "n_seq_max": n_seq_max, "n_batch": n_batch,
                       "weight_kernels": self.kernels.describe(),
                       "kv_cells": self._kv_words(type_k, type_v, kv_choice)},
                memory=self.memory, kv_streams=self.n_stream,
            )
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------- load / close

    def _load(self, n_gpu_layers: int) -> None:
        self._model = model = load_model(self.path, n_gpu_layers, extra_bufts=self._extra_bufts)
        self._stack.callback(llama_cpp.llama_model_free, model)
        # Adapters die before the model (llama.cpp would free them with it otherwise).
        self._lora = AdapterSet(model)
        self._stack.callback(self._lora.free_all)
        self.vocab = Vocab(model)
        self._vocab = self.vocab.ptr
        self._n_vocab = self.vocab.n_vocab
        self._n_embd = llama_cpp.llama_model_n_embd(model)
        self._logits_row_type: Any = ctypes.c_float * int(self._n_vocab)
        with native_errors() as errors:
            ctx = self._new_context()
        if not ctx and (self.type_k, self.type_v) != ("f16", "f16") and not quant_heads_fit(model):
            # NOTE: a quantized KV cache needs head sizes that are multiples of its block
            # (32 for q8_0); such a model gets an f16 cache instead of failing to load. Only
            # such a model: a context refused for want of memory must not be retried with a
            # larger (and not exact) f16 cache.
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
        self.memory = memory_caps(model)

    def _kv_words(self, type_k: str, type_v: str, chosen: str | None) -> str:
        if (self.type_k, self.type_v) != (type_k, type_v):
            return f"{self.type_k} K+V: this model's head size does not fit a {type_k}/{type_v} cache"
        return chosen or f"{type_k} K / {type_v} V: as configured"

    def _new_context(self, *, n_ctx: int | None = None, n_seq_max: int | None = None, embeddings: bool = False) -> Any:
        """A context of this model with this backend's KV settings (NULL when refused)."""
        n_seq = n_seq_max or self.n_seq_max
        n = n_ctx or self.n_ctx_per_seq * n_seq
        cparams = ctx_params(
            n_ctx=n, n_seq_max=n_seq,
            n_batch=n if embeddings else self.n_batch,
            n_ubatch=n if embeddings else self.n_ubatch,
            n_threads=self.n_threads, n_threads_batch=self.n_threads_batch, flash_attn=self._flash_attn,
            type_k=KV_TYPES[self.type_k], type_v=KV_TYPES[self.type_v],
            kv_unified=self._kv_unified, swa_full=self._swa_full, embeddings=embeddings,
        )
        return llama_cpp.llama_init_from_model(self._model, cparams)

    def close(self) -> None:
        """Free every native handle: contexts, then adapters, then the model. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._rows.clear()
        self._drafted.clear()
        self._stack.close()

    def __enter__(self) -> LlamaBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # See app.engine.llama.llama_info (kept here: callers and tests ask the backend class).
    ctx_params_hash = staticmethod(ctx_params_hash)

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
        results: list[StepResult] = []
        for op in ops:
            if type(op) is DecodeOp:
                accepted, token = self._verify(op)
                results.append(Sampled(token, self.is_eog(token), accepted))
            else:
                results.append(_PREFILLED)
        return results

    def _verify(self, op: DecodeOp) -> tuple[tuple[int, ...], int]:
        """Sample the op's row, and the rows of its drafts while they are accepted."""
        first = self._rows[op.seq_id]
        smpl = op.sampler
        if op.greedy or smpl is None or smpl.is_plain_greedy:
            sample_row: Callable[[int], int] = lambda i: self._argmax(first + i)  # noqa: E731
        else:
            ptr, ctx, sample = smpl.ptr, self._ctx, llama_cpp.llama_sampler_sample
            sample_row = lambda i: int(sample(ptr, ctx, first + i))  # noqa: E731
            if smpl.is_grammar_greedy:  # argmax first, the whole vocabulary only if refused (sampling)
                whole, view = sample_row, self._logits_view
                sample_row = lambda i: smpl.sample_greedy(view(first + i), lambda: whole(i))  # noqa: E731
        if not op.drafted:
            return (), sample_row(0)
        return verify(op.drafted, sample_row)

    def decode(
        self, ops: Sequence[Op], sampled: Sequence[StepResult], *, background: bool = False,
        before: Callable[[], None] | None = None,
    ) -> None:
        """Second half of a tick: the prefill slices and the sampled tokens (with their drafts)
        in ONE ``llama_decode``; first, each verified seq's cells after its accepted drafts
        are dropped. ``background``: the tick only reads ahead, on ``n_threads_background``
        threads. ``before``: called right before the ``llama_decode`` (``Backend.decode``).

        ``DecodeFailed`` leaves the seqs of the tick unusable (their samplers advanced, and
        their KV may hold part of the batch): fail their requests and free their seqs.
        """
        if not ops:
            return
        if len(sampled) != len(ops):
            raise ValueError(f"{len(sampled)} sampled results for {len(ops)} ops")
        self._check_pushes(ops, sampled)
        batch = self._batch
        new_rows: dict[int, int] = {}
        pending: dict[int, tuple[int, tuple[int, ...]]] = {}
        row = 0
        for op, res in zip(ops, sampled, strict=True):
            if type(op) is DecodeOp:
                res = cast(Sampled, res)
                pos = op.pos + len(res.accepted)
                if op.drafted:
                    self.seq_rm(op.seq_id, pos)  # the rejected drafts (or all after a stop)
                end = batch.put(row, (res.token, *res.drafts), pos, op.seq_id, logits=True)
                new_rows[op.seq_id] = row
                if res.drafts:
                    pending[op.seq_id] = (pos + 1, res.drafts)
                row = end
            else:
                prefill = cast(PrefillOp, op)
                if prefill.tokens:
                    row = batch.put(row, prefill.tokens, prefill.pos, prefill.seq_id)
                    if prefill.want_logits:
                        batch.logits[row - 1] = 1
                        new_rows[prefill.seq_id] = row - 1
        self._use_threads(background)
        if before is not None:
            before()
        self._decode(self._ctx, batch, row)
        self._rows = new_rows
        self._drafted = pending

    def _use_threads(self, background: bool) -> None:
        """The main context's threads for the next ``llama_decode`` (set only when they change).
        NOTE: the thread count changes no KV byte and no logit
        (``tests/integration/backend/test_exact_kv.py`` compares 3 threads with 1)."""
        want = (self.n_threads_background,) * 2 if background else (self.n_threads, self.n_threads_batch)
        if want != self._threads:
            llama_cpp.llama_set_n_threads(self._ctx, *want)
            self._threads = want

    def seq_rm(self, seq_id: int, start: int = 0) -> None:
        """``SeqKv.seq_rm``, and the seq's pending drafts at ``start`` and after are forgotten."""
        super().seq_rm(seq_id, start)
        held = self._drafted.get(seq_id)
        if held is not None:
            first, drafts = held
            keep = max(0, start - first)
            if keep == 0:
                del self._drafted[seq_id]
            elif keep < len(drafts):
                self._drafted[seq_id] = (first, drafts[:keep])

    def step(self, ops: Sequence[Op]) -> list[StepResult]:
        """``sample`` then ``decode``: a whole tick at once (tests and tools)."""
        results = self.sample(ops)
        self.decode(ops, results)
        return results

    def _argmax(self, row: int) -> int:
        """Greedy choice from one output row of the main context.

        NOTE: numpy's argmax over the logits (~10 µs) instead of a greedy llama_sampler (which
        builds a candidate array over the whole vocabulary, ~100 µs); both pick the first
        maximum, so the tokens are identical.
        """
        return int(self._logits_view(row).argmax())

    def greedy(self, seq_id: int) -> int:
        """The argmax of the seq's newest logits (a draft model's choice, ``draft_model``)."""
        row = self._rows.get(seq_id)
        if row is None:
            raise InvalidRequest(f"seq {seq_id} has no logits from the previous tick")
        return self._argmax(row)

    def seq_logits(self, seq_id: int) -> np.ndarray[Any, np.dtype[np.float32]]:
        """A copy of the logits the seq's next decode row will sample from (tests, debugging)."""
        row = self._rows.get(seq_id)
        if row is None:
            raise InvalidRequest(f"seq {seq_id} has no logits from the previous tick")
        return self._logits_view(row).copy()

    def _logits_view(self, row: int) -> np.ndarray[Any, np.dtype[np.float32]]:
        address = _logits_ith_address(self._ctx, row)
        if not address:
            raise RuntimeError(f"llama.cpp has no logits for batch row {row}")
        return np.frombuffer(self._logits_row_type.from_address(address), dtype=np.float32)

    def _decode(self, ctx: Any, batch: Batch, n_tokens: int) -> None:
        self._rows, self._drafted = {}, {}
        batch.struct.n_tokens = n_tokens
        rc = llama_cpp.llama_decode(ctx, batch.struct)
        if rc != 0:
            raise DecodeFailed(int(rc))

    # ----------------------------------------------------------------- samplers

    def new_sampler(self, params: SamplingParams) -> SamplerChain:
        if params.grammar:
            self.check_grammar(params.grammar)  # remembered: free after the caller's check
        return build_chain(self._vocab, params)

    def check_grammar(self, grammar: str) -> None:
        check_grammar(grammar, self.vocab)

    def free_sampler(self, sampler: Any) -> None:
        if isinstance(sampler, SamplerChain):
            sampler.close()

    def accept(self, sampler: Any, token: int) -> None:
        if isinstance(sampler, SamplerChain):
            sampler.accept(token)

    # ----------------------------------------------------------------- vocabulary

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        return self.vocab.tokenize(text, add_special, parse_special)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.vocab.detokenize(tokens)

    def token_piece(self, token: int) -> bytes:
        return self.vocab.token_piece(token)

    def is_eog(self, token: int) -> bool:
        return self.vocab.is_eog(token)

    # ----------------------------------------------------------------- chat template

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, tools: list[Any] | None = None
    ) -> str:
        source = self.info.chat_template or CHATML_TEMPLATE
        return render_chat_template(
            source, messages, bos_token=self.info.bos_token, eos_token=self.info.eos_token,
            add_generation_prompt=add_generation_prompt, tools=tools,
        )

    # ----------------------------------------------------------------- LoRA

    def load_adapter(self, path: str) -> LoraAdapter:
        return self._lora.load(str(path))

    def set_adapters(self, adapters: Sequence[tuple[Any, float]]) -> None:
        """Apply exactly this set of (adapter, scale) to every context of the model."""
        self._lora.set(adapters, self._contexts())

    def free_adapter(self, adapter: Any) -> None:
        """Detach (if active) and free an adapter. Idempotent."""
        self._lora.free(adapter, self._contexts())

    def _contexts(self) -> list[Any]:
        return [self._ctx] if self._embed_ctx is None else [self._ctx, self._embed_ctx]
