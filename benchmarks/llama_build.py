"""What a llama.cpp build costs: prefill and decode speed of the installed llama-cpp-python.

    python -m benchmarks.llama_build [MODEL.gguf] [--threads 2] [--rounds 3]

Raw bindings, no Hearth: one prompt of ``PREFILL_TOKENS`` read in ubatches of 512, then
``DECODE_TOKENS`` greedy tokens of one sequence, and 8 sequences decoding together, with
Hearth's default KV settings (q8_0 K / f16 V, flash attention, a stream per sequence). Prints
the medians of ``--rounds`` rounds and which CPU backend llama.cpp loaded, as one JSON line.

To compare builds, run it once per build, each on its own ``llama_cpp`` (PYTHONPATH pointing
at an unpacked wheel, or a copy of ``llama_cpp/`` whose ``lib/`` holds a single
``libggml-cpu-<variant>.so``, which forces that variant); docs/llama-cpp-build.md has the
table and the commands.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import llama_cpp

from app.engine.config import DEFAULT_TYPE_K, DEFAULT_TYPE_V
from app.engine.llama.llama_handles import KV_TYPES, Batch
from app.engine.llama.native_log import init_llama
from app.engine.llama.native_probe import cpu_identity, loaded_cpu_backend

PREFILL_TOKENS = 1000
DECODE_TOKENS = 64


def _context(model: Any, n_seq: int, threads: int) -> Any:
    p = llama_cpp.llama_context_default_params()
    p.n_ctx, p.n_seq_max = 2048 * n_seq, n_seq
    p.n_batch = p.n_ubatch = 512
    p.n_threads = p.n_threads_batch = threads
    p.type_k, p.type_v = KV_TYPES[DEFAULT_TYPE_K], KV_TYPES[DEFAULT_TYPE_V]
    p.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
    p.kv_unified = False
    p.no_perf = True
    ctx = llama_cpp.llama_init_from_model(model, p)
    if not ctx:
        raise RuntimeError("no context")
    return ctx


def _decode(ctx: Any, batch: Batch, n: int) -> None:
    batch.struct.n_tokens = n
    if llama_cpp.llama_decode(ctx, batch.struct) != 0:
        raise RuntimeError("llama_decode failed")


def one_round(model: Any, n_vocab: int, threads: int) -> dict[str, float]:
    tokens = [(i * 7919 + 13) % n_vocab for i in range(PREFILL_TOKENS)]
    batch = Batch(512)
    ctx = _context(model, 1, threads)
    try:
        start = time.perf_counter()
        for at in range(0, PREFILL_TOKENS, 512):
            chunk = tokens[at : at + 512]
            batch.put(0, chunk, at, 0, logits=False)
            batch.logits[len(chunk) - 1] = 1
            _decode(ctx, batch, len(chunk))
        prefill = PREFILL_TOKENS / (time.perf_counter() - start)
        start = time.perf_counter()
        for i in range(DECODE_TOKENS):
            batch.put(0, [tokens[i]], PREFILL_TOKENS + i, 0, logits=True)
            _decode(ctx, batch, 1)
        decode1 = DECODE_TOKENS / (time.perf_counter() - start)
    finally:
        llama_cpp.llama_free(ctx)
    ctx = _context(model, 8, threads)
    try:
        row = 0
        for s in range(8):  # a 32-token prompt each, not timed
            row = batch.put(row, tokens[s * 32 : s * 32 + 32], 0, s, logits=False)
        _decode(ctx, batch, row)
        start = time.perf_counter()
        for i in range(DECODE_TOKENS):
            for s in range(8):
                batch.put(s, [tokens[i + s]], 32 + i, s, logits=True)
            _decode(ctx, batch, 8)
        decode8 = 8 * DECODE_TOKENS / (time.perf_counter() - start)
    finally:
        llama_cpp.llama_free(ctx)
    return {"prefill_tok_s": prefill, "decode1_tok_s": decode1, "decode8_tok_s": decode8}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.llama_build")
    parser.add_argument("model", nargs="?")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.model is None:
        from app.models.default_model import default_model_path

        args.model = str(default_model_path())
    init_llama()
    model = llama_cpp.llama_model_load_from_file(args.model.encode(), llama_cpp.llama_model_default_params())
    if not model:
        raise SystemExit(f"could not load {args.model}")
    try:
        n_vocab = int(llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model)))
        rounds = [one_round(model, n_vocab, args.threads) for _ in range(args.rounds)]
    finally:
        llama_cpp.llama_model_free(model)
    result: dict[str, Any] = {
        key: round(statistics.median(r[key] for r in rounds), 1) for key in rounds[0]
    }
    result.update(
        backend=loaded_cpu_backend() or "static", cpu=cpu_identity().partition(" | ")[0],
        threads=args.threads, rounds=args.rounds, llama_cpp=str(llama_cpp.__file__),
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
