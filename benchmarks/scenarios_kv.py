"""KV: what the KV layout and cell type cost (issue 12), each choice side by side in one run.

Four settings on the llama.cpp backend alone (no scheduler, no cache), greedy, 2 threads:

* unified KV, f16 K/V — the layout before issue 12;
* one KV stream per sequence, f16 K/V;
* one stream per sequence, q8_0 K/V — Hearth's default from issue 12 to issue 24;
* one stream per sequence, q8_0 K, f16 V — the default since issue 24, the fastest pair
  measured whose K and V types differ (which keeps every batching and chunking bit-identical,
  ``ModelConfig.type_v``).

For each: milliseconds per decode tick with N = 1, 4, 8 sequences at short contexts
(~20 tokens) and with 4 sequences at 700-token contexts, and the time to prefill one 512- and
one 2,000-token prompt (in n_batch = 512 chunks). The settings take turns within each round,
so this machine's drift hits them alike; figures are medians over the rounds.
"""

from __future__ import annotations

import time
from typing import Any

from app.engine.backend import DecodeOp, PrefillOp
from app.engine.llama_backend import LlamaBackend
from benchmarks.common import N_THREADS, Result, median, progress
from benchmarks.raw_loop import PROMPTS

SETTINGS: list[tuple[str, dict[str, Any]]] = [
    ("unified, f16", {"kv_unified": True, "type_k": "f16", "type_v": "f16"}),
    ("per-stream, f16", {"kv_unified": False, "type_k": "f16", "type_v": "f16"}),
    ("per-stream, q8_0 K+V", {"kv_unified": False, "type_k": "q8_0", "type_v": "q8_0"}),
    ("per-stream, q8_0 K + f16 V (default)", {"kv_unified": False, "type_k": "q8_0", "type_v": "f16"}),
]
DECODE_TICKS = 32


def _ms_per_tick(backend: LlamaBackend, contexts: dict[int, list[int]]) -> float:
    """Prefill each seq's context (not timed), then time DECODE_TICKS ticks of all seqs."""
    for seq, tokens in contexts.items():
        backend.seq_rm(seq)
        body = tokens[:-1]
        for start in range(0, len(body), 512):
            backend.step([PrefillOp(seq, tuple(body[start : start + 512]), start, False)])
    # The last token of every context in one tick, so every seq has logits to sample from.
    backend.step([PrefillOp(seq, (t[-1],), len(t) - 1, True) for seq, t in contexts.items()])
    pos = {seq: len(t) for seq, t in contexts.items()}
    t0 = time.perf_counter()
    for i in range(DECODE_TICKS):
        backend.step([DecodeOp(seq, None, p + i, greedy=True) for seq, p in pos.items()])
    return (time.perf_counter() - t0) * 1000 / DECODE_TICKS


def _prefill_ms(backend: LlamaBackend, tokens: list[int]) -> float:
    backend.seq_rm(0)
    t0 = time.perf_counter()
    for start in range(0, len(tokens), 512):
        part = tuple(tokens[start : start + 512])
        backend.step([PrefillOp(0, part, start, start + 512 >= len(tokens))])
    return (time.perf_counter() - t0) * 1000


def _measure(path: str, settings: dict[str, Any]) -> dict[str, float]:
    with LlamaBackend(path, n_ctx_per_seq=2304, n_seq_max=8, n_batch=512, n_threads=N_THREADS,
                      flash_attn=True, **settings) as backend:
        short = [backend.tokenize(p) for p in PROMPTS]
        text = " ".join(PROMPTS) * 40
        long_tokens = backend.tokenize(text)
        out: dict[str, float] = {}
        for n in (1, 4, 8):
            out[f"decode N={n} short"] = _ms_per_tick(backend, {s: short[s] for s in range(n)})
        out["decode N=4 x 700"] = _ms_per_tick(
            backend, {s: long_tokens[s * 50 : s * 50 + 700] for s in range(4)}
        )
        out["prefill 512"] = _prefill_ms(backend, long_tokens[:512])
        out["prefill 2000"] = _prefill_ms(backend, long_tokens[:2000])
        out["kv bytes/token"] = float(len(backend.kv_pack(0)) / 2000)
    return out


def kv_layout(path: str, rounds: int = 3) -> Result:
    res = Result(
        "KV",
        "KV layout and cell type: decode ms/tick and prefill ms on the bare backend",
        "issue 12: record the cost of each choice (no goal)",
        ["setting", "N=1 short", "N=4 short", "N=8 short", "N=4 × 700", "prefill 512", "prefill 2000",
         "KV bytes/token"],
    )
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in SETTINGS}
    for r in range(rounds):
        for name, settings in SETTINGS:
            progress(f"KV round {r + 1}/{rounds}: {name}")
            runs[name].append(_measure(path, settings))
    keys = ["decode N=1 short", "decode N=4 short", "decode N=8 short", "decode N=4 x 700",
            "prefill 512", "prefill 2000", "kv bytes/token"]
    for name, _ in SETTINGS:
        med = {k: median([run[k] for run in runs[name]]) for k in keys}
        res.rows.append([name, *[round(med[k], 1) for k in keys]])
        res.figures[name] = {"median": med, "runs": runs[name]}
    base, ours = res.figures[SETTINGS[0][0]]["median"], res.figures[SETTINGS[-1][0]]["median"]
    res.figures["default_vs_before"] = {k: ours[k] / base[k] for k in keys}
    res.note = "default / before: " + ", ".join(
        f"{k} {ours[k] / base[k]:.2f}×" for k in keys
    )
    return res
