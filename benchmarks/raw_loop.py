"""The "raw" peer of B1 (docs/benchmarks.md): the simplest loop over llama.cpp's low-level bindings.

One ``llama_decode`` per tick over all N sequences, greedy sampling in C (a greedy
``llama_sampler``), no scheduler, no cache, no Python objects per token beyond the batch
writes. This is the machine's limit for our stack; Hearth's B1 goal is ≥ 0.97 × this.

    python -m benchmarks.raw_loop [MODEL.gguf]      # prints tok/s for N = 1, 2, 4, 8
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

import llama_cpp

from app.engine.config import DEFAULT_TYPE_K, DEFAULT_TYPE_V
from app.engine.llama.kv_checks import PROMPTS
from app.engine.llama.llama_handles import KV_TYPES
from app.engine.llama.native_log import init_llama


def raw_decode_throughput(
    model_path: str, n_streams: int, n_tokens: int = 64, n_threads: int = 2, flash_attn: bool = True,
    kv_unified: bool = False, type_k: str = DEFAULT_TYPE_K, type_v: str = DEFAULT_TYPE_V,
    include_prefill: bool = False,
    prompt_tokens: Sequence[Sequence[int]] | None = None,
) -> float:
    """Aggregate greedy decode tok/s of ``n_streams`` sequences, ``n_tokens`` each.

    Prompts are prefilled together first (not timed, unless ``include_prefill``: B1e's end to
    end); the timed part is ``n_tokens`` ticks, each = sample every seq in C + one
    ``llama_decode`` of N rows. EOG is ignored.

    NOTE: flash attention, the KV layout (one stream per sequence) and the KV cell types
    (q8_0 K, f16 V unless the caller passes the pair Hearth resolved: B1 does) are set explicitly, so
    both sides of B1 run the same kernels and B1 compares loops, not settings. What the
    settings themselves cost is the KV scenario's business.

    ``prompt_tokens``: the streams' prompts as token ids (B12's chat prompts) instead of
    ``PROMPTS``; together at most one 512-token batch.
    """
    n_prompts = len(PROMPTS) if prompt_tokens is None else len(prompt_tokens)
    if not 1 <= n_streams <= n_prompts:
        raise ValueError(f"n_streams must be in 1..{n_prompts}")
    init_llama()  # logs go to Python logging, as in Hearth
    model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), llama_cpp.llama_model_default_params())
    if not model:
        raise RuntimeError(f"could not load {model_path}")
    ctx: Any = None
    smpl: Any = None
    batch: Any = None
    try:
        vocab = llama_cpp.llama_model_get_vocab(model)
        params = llama_cpp.llama_context_default_params()
        longest = max((len(p) for p in prompt_tokens or ()), default=0)
        params.n_ctx = max(512, -(-(longest + n_tokens) // 256) * 256) * n_streams
        params.n_batch = params.n_ubatch = 512
        params.n_seq_max = n_streams
        params.n_threads = params.n_threads_batch = n_threads
        params.kv_unified = kv_unified
        params.type_k, params.type_v = KV_TYPES[type_k], KV_TYPES[type_v]
        # The same attention kernel as Hearth's default ModelConfig, so B1 compares loops, not kernels.
        params.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        params.no_perf = True
        ctx = llama_cpp.llama_init_from_model(model, params)
        if not ctx:
            raise RuntimeError("could not create a context")
        smpl = llama_cpp.llama_sampler_init_greedy()
        batch = llama_cpp.llama_batch_init(512, 0, 1)

        if prompt_tokens is None:
            prompts = [_tokenize(vocab, p) for p in PROMPTS[:n_streams]]
        else:
            prompts = [list(p) for p in prompt_tokens[:n_streams]]
        if sum(map(len, prompts)) > 512:
            raise ValueError("the prompts must fit one 512-token batch together")
        n = 0
        last_row = []
        for seq, tokens in enumerate(prompts):
            for i, tok in enumerate(tokens):
                _put(batch, n, tok, i, seq, i == len(tokens) - 1)
                n += 1
            last_row.append(n - 1)
        batch.n_tokens = n
        submitted = time.perf_counter()
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise RuntimeError("prefill failed")

        positions = [len(t) for t in prompts]
        start = submitted if include_prefill else time.perf_counter()
        for _ in range(n_tokens):
            for seq in range(n_streams):
                tok = llama_cpp.llama_sampler_sample(smpl, ctx, last_row[seq])
                _put(batch, seq, tok, positions[seq], seq, True)
                last_row[seq] = seq
                positions[seq] += 1
            batch.n_tokens = n_streams
            if llama_cpp.llama_decode(ctx, batch) != 0:
                raise RuntimeError("decode failed")
        elapsed = time.perf_counter() - start
        return n_streams * n_tokens / elapsed
    finally:
        if batch is not None:
            llama_cpp.llama_batch_free(batch)
        if smpl is not None:
            llama_cpp.llama_sampler_free(smpl)
        if ctx is not None:
            llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)


def _put(batch: Any, i: int, token: int, pos: int, seq: int, logits: bool) -> None:
    batch.token[i] = token
    batch.pos[i] = pos
    batch.n_seq_id[i] = 1
    batch.seq_id[i][0] = seq
    batch.logits[i] = logits


def _tokenize(vocab: Any, text: str) -> list[int]:
    data = text.encode()
    buf = (llama_cpp.llama_token * (len(data) + 8))()
    n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, len(buf), True, True)
    return list(buf[:n])


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        path = argv[1]
    else:
        from app.models.default_model import default_model_path

        path = str(default_model_path())
    for n_streams in (1, 2, 4, 8):
        tps = raw_decode_throughput(path, n_streams)
        sys.stdout.write(f"raw  N={n_streams}  {tps:7.1f} tok/s\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
