"""KV: the llama.cpp context settings under Hearth's floor (issue 24), side by side in one run.

Every setting on the llama.cpp backend alone (no scheduler, no cache), greedy, q8_0 K + f16 V
unless it says otherwise, one KV stream per sequence:

* flash attention on (Hearth's default) or off (V stored transposed, attention as two
  matmuls: llamafile's tinyBLAS for ubatches of two or more rows, ggml's vec_dot for one);
* ``n_ubatch`` 512 / 256 / 128, each timed with prefill chunks of the same size;
* ``n_threads_batch`` 1 instead of 2 (the threads of ubatches of more than one row);
* flash attention off with f16 K and V (llama.cpp's own defaults).

Timed: the prefill of one 512- and one 2,000-token prompt, and ms per decode tick with one
sequence (short context) and with four 700-token streams. The settings take turns within a
round, the order reversed every other round, so this machine's drift hits them alike;
figures are medians over the rounds. Then each setting's exactness checks
(``app.engine.llama.kv_checks``): a setting is exact when every check is bit-identical, and
"same KV as the default" when its logits and KV bytes equal the default's (only then may a
cache filled under one serve the other without the setting in ``ctx_params_hash``).

Last, the cold prefill a user waits for, against llama.cpp's own defaults
(``cold_vs_llama_default``): a new 2,000-token prompt through Hearth's engine (the "auto"
cells, the cache on, the first token on the caller's side) against the bare backend with
llama.cpp's defaults — f16 K+V, flash attention, one unified KV stream, ``n_batch`` 2,048,
its own kernels (the tiled K-quant matmul on, flash attention's shape-dependent paths) — in a
process of its own, reading the same tokens. Goal: Hearth ≤ 1.15 × llama.cpp.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from app.engine.backend import DecodeOp, PrefillOp
from app.engine.llama.kv_calibration import resolve
from app.engine.llama.kv_checks import CHECKS, PROMPTS, run_checks
from app.engine.llama.llama_backend import LlamaBackend
from app.engine.llama.weight_kernels import FA_ENV, MM_ENV, TILED_ENV
from benchmarks.common import N_THREADS, Result, config, engine_at, median, progress
from benchmarks.scenarios_cache import first_token_ms

DEFAULT = "FA on · ubatch 512 (default)"
SETTINGS: list[tuple[str, dict[str, Any]]] = [
    (DEFAULT, {"flash_attn": True, "n_ubatch": 512}),
    ("FA on · ubatch 256", {"flash_attn": True, "n_ubatch": 256}),
    ("FA on · ubatch 128", {"flash_attn": True, "n_ubatch": 128}),
    ("FA on · ubatch 512 · threads_batch 1", {"flash_attn": True, "n_ubatch": 512, "n_threads_batch": 1}),
    ("FA off · ubatch 512", {"flash_attn": False, "n_ubatch": 512}),
    ("FA off · ubatch 256", {"flash_attn": False, "n_ubatch": 256}),
    ("FA off · ubatch 128", {"flash_attn": False, "n_ubatch": 128}),
    ("FA off · f16 K+V · ubatch 512", {"flash_attn": False, "n_ubatch": 512, "type_k": "f16", "type_v": "f16"}),
    # The other exact candidates: which is fastest depends on the CPU (q8_0 K+V read prompts
    # 1.8 x faster than q8_0 K / f16 V on an Intel Xeon with AVX-512 FP16/BF16).
    ("FA on · q8_0 K+V · ubatch 512", {"flash_attn": True, "n_ubatch": 512, "type_k": "q8_0", "type_v": "q8_0"}),
    ("FA on · q8_0 K / bf16 V · ubatch 512", {"flash_attn": True, "n_ubatch": 512, "type_k": "q8_0", "type_v": "bf16"}),
    # f16 K+V with flash attention: exact with Hearth's batch-invariant flash attention
    # (app.engine.llama.weight_kernels.FA_ENV), llama.cpp's default cell types otherwise.
    ("FA on · f16 K+V · ubatch 512", {"flash_attn": True, "n_ubatch": 512, "type_k": "f16", "type_v": "f16"}),
]
DECODE_TICKS = 32
FASTER_BY = 0.05
COLD_TOKENS = 2000
COLD_GOAL = 1.15
LLAMA_DEFAULT = "llama.cpp's defaults: f16 K+V · FA auto · unified KV · n_batch 2048 (bare)"
HEARTH_COLD = "Hearth, cold: \"auto\" cells, engine and cache (first token)"
TIMED = ["prefill 512", "prefill 2000", "decode N=1", "decode 4 x 700"]


def _ms_per_tick(backend: LlamaBackend, last: dict[int, tuple[int, int]]) -> float:
    """Every seq already holds its context but its last token (``last[seq] = (token, pos)``):
    one tick feeds those (not timed), then DECODE_TICKS greedy ticks of all seqs are timed."""
    backend.step([PrefillOp(seq, (tok,), pos, True) for seq, (tok, pos) in last.items()])
    t0 = time.perf_counter()
    for i in range(DECODE_TICKS):
        backend.step([DecodeOp(seq, None, pos + 1 + i, greedy=True) for seq, (_, pos) in last.items()])
    return (time.perf_counter() - t0) * 1000 / DECODE_TICKS


def _prefill_ms(backend: LlamaBackend, tokens: list[int], chunk: int) -> float:
    backend.seq_rm(0)
    t0 = time.perf_counter()
    for start in range(0, len(tokens), chunk):
        part = tuple(tokens[start : start + chunk])
        backend.step([PrefillOp(0, part, start, start + chunk >= len(tokens))])
    return (time.perf_counter() - t0) * 1000


def _measure(path: str, settings: dict[str, Any], n_threads: int) -> dict[str, float]:
    chunk = int(settings["n_ubatch"])
    with LlamaBackend(path, n_ctx_per_seq=2304, n_seq_max=4, n_batch=512, n_threads=n_threads,
                      **settings) as backend:
        tokens = backend.tokenize(" ".join(PROMPTS) * 40)
        out = {"prefill 512": _prefill_ms(backend, tokens[:512], chunk),
               "prefill 2000": _prefill_ms(backend, tokens[:2000], chunk)}
        short = backend.tokenize(PROMPTS[0])
        backend.seq_rm(0)
        backend.step([PrefillOp(0, tuple(short[:-1]), 0, False)])
        out["decode N=1"] = _ms_per_tick(backend, {0: (short[-1], len(short) - 1)})
        # Four 700-token streams: the 2,000-token prompt cut to 700 cells and copied.
        backend.seq_rm(0)
        _prefill_ms(backend, tokens[:699], chunk)
        for seq in range(1, 4):
            backend.seq_cp(0, seq, 699)
        out["decode 4 x 700"] = _ms_per_tick(backend, {seq: (tokens[699], 699) for seq in range(4)})
        out["kv bytes/token"] = float(len(backend.kv_pack(0)) / (700 + DECODE_TICKS))
    return out


def kv_settings(path: str, rounds: int = 2, only: list[str] | None = None, n_threads: int = N_THREADS) -> Result:
    """``only``: the settings to run besides the default; ``n_threads`` 1 on a loaded machine
    (two spinning threads on two shared cores measure the scheduler of the OS, not llama.cpp)."""
    chosen = [(name, s) for name, s in SETTINGS if only is None or name in only or name == DEFAULT]
    res = Result(
        "KV",
        "llama.cpp context settings: prefill ms and decode ms/tick on the bare backend, with exactness",
        "issue 24: the fastest bit-identical setting is the default; a faster inexact one only a labelled choice",
        ["setting", "prefill 512", "prefill 2000", "decode N=1", "decode 4 × 700", "× default (2000)",
         "exact", "same KV as default", "largest |Δlogit|", "failed checks"],
    )
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in chosen}
    for r in range(rounds):
        order = chosen if r % 2 == 0 else chosen[::-1]
        for name, settings in order:
            progress(f"KV round {r + 1}/{rounds}: {name}")
            runs[name].append(_measure(path, {"n_threads_batch": None, **settings}, n_threads))
    checks: dict[str, dict[str, Any]] = {}
    for name, settings in chosen:
        progress(f"KV exactness: {name}")
        checks[name] = run_checks(path, {"n_threads": n_threads, **settings}, PROMPTS)
    base = median([run["prefill 2000"] for run in runs[DEFAULT]])
    for name, _ in chosen:
        med = {k: median([run[k] for run in runs[name]]) for k in [*TIMED, "kv bytes/token"]}
        got = checks[name]
        failed = [c for c in CHECKS if not got[c][0]]
        res.rows.append([
            name, round(med["prefill 512"], 1), round(med["prefill 2000"], 1), round(med["decode N=1"], 2),
            round(med["decode 4 x 700"], 2), round(med["prefill 2000"] / base, 3),
            "yes" if not failed else "no", "yes" if got["fingerprint"] == checks[DEFAULT]["fingerprint"] else "no",
            max(got[c][1] for c in CHECKS),
            ", ".join(f"chunking ({', '.join(got['chunkings that differ'])})" if c == "chunking" else c
                      for c in failed) or "—",
        ])
        res.figures[name] = {"median": med, "runs": runs[name], "checks": {c: list(got[c]) for c in CHECKS},
                             "chunkings that differ": got["chunkings that differ"], "fingerprint": got["fingerprint"]}
    auto = resolve(path, background=False)
    auto_row = AUTO_ROWS.get((auto.type_k, auto.type_v), DEFAULT)
    met, verdict = _verdict(res.rows, auto_row)
    auto_exact = next((row[6] for row in res.rows if row[0] == auto_row), "not measured")
    cold = cold_vs_llama_default(path, rounds, n_threads)
    res.figures["cold prefill vs llama.cpp default"] = cold
    res.rows.append([LLAMA_DEFAULT, "—", round(median(cold["llama_default_ms"]), 1), "—", "—", "—",
                     "no", "—", "—", "shape-dependent paths"])
    res.rows.append([HEARTH_COLD, "—", round(median(cold["hearth_ms"]), 1), "—", "—",
                     f"{cold['ratio']:.3f} × llama.cpp", auto_exact, "—", "—", "—"])
    res.met = met and cold["met"]
    res.note = (f"{rounds} rounds, settings alternated (order reversed every other round); "
                f"n_threads {n_threads}, n_batch 512, prefill chunk = n_ubatch; SmolLM2 weights. "
                f"Hearth's \"auto\" KV cells here: {auto.type_k} K / {auto.type_v} V, {auto.why}. {verdict} "
                f"Cold prefill of {COLD_TOKENS} new tokens through Hearth: {cold['ratio']:.3f} × llama.cpp's "
                f"default bare prefill (goal ≤ {COLD_GOAL}; medians of {rounds}).")
    return res


_LLAMA_DEFAULT_CHILD = r"""
import json, sys
from app.engine.llama.llama_backend import LlamaBackend
from benchmarks.scenarios_kv import _prefill_ms
path, threads = sys.argv[1], int(sys.argv[2])
prompts = json.loads(sys.stdin.read())
with LlamaBackend(path, n_ctx_per_seq=4096, n_seq_max=1, n_batch=2048, n_ubatch=512, n_threads=threads,
                  type_k="f16", type_v="f16", flash_attn=True, kv_unified=True) as b:
    print(json.dumps([_prefill_ms(b, p, len(p)) for p in prompts]))  # each prompt in one step
"""


def _llama_default_ms(path: str, prompts: list[list[int]], n_threads: int) -> list[float]:
    """Bare prefills under llama.cpp's own defaults, in a child: Hearth's switches
    (batch-invariant flash attention and float matmuls, no tiled K-quant matmul) are read once
    per process."""
    env = {**os.environ, FA_ENV: "0", MM_ENV: "0", TILED_ENV: "1"}
    out = subprocess.run([sys.executable, "-c", _LLAMA_DEFAULT_CHILD, path, str(n_threads)], input=json.dumps(prompts),
                         env=env, capture_output=True, text=True, timeout=1800,
                         cwd=Path(__file__).resolve().parents[1])
    if out.returncode != 0:
        raise RuntimeError(f"llama.cpp default prefill failed: {out.stderr[-1500:]}")
    return [float(x) for x in json.loads(out.stdout.strip().splitlines()[-1])]


def cold_vs_llama_default(path: str, rounds: int = 2, n_threads: int = N_THREADS) -> dict[str, Any]:
    """Hearth's cold TTFT of a new ``COLD_TOKENS``-token prompt against llama.cpp's default
    bare prefill of the same tokens, alternated over ``rounds``; a new prompt every round so
    that nothing is in Hearth's cache."""
    hearth: list[float] = []
    llama: list[float] = []
    with engine_at() as engine:
        model = engine.load_model("m", config(path, n_seq_max=1, n_threads=n_threads))
        text = " ".join(PROMPTS) * 40
        prompts = [model.tokenize(f"Round {r}: {text}")[:COLD_TOKENS] for r in range(rounds)]
        for r, prompt in enumerate(prompts):
            progress(f"KV cold prefill round {r + 1}/{rounds}")
            if r % 2:
                hearth.append(first_token_ms(model, prompt, response_tokens=1)[0])
                llama += _llama_default_ms(path, [prompt], n_threads)
            else:
                llama += _llama_default_ms(path, [prompt], n_threads)
                hearth.append(first_token_ms(model, prompt, response_tokens=1)[0])
    ratio = median(hearth) / median(llama)
    return {"hearth_ms": hearth, "llama_default_ms": llama, "ratio": ratio, "met": ratio <= COLD_GOAL,
            "tokens": COLD_TOKENS}


AUTO_ROWS = {("q8_0", "f16"): DEFAULT, ("q8_0", "q8_0"): "FA on · q8_0 K+V · ubatch 512",
             ("q8_0", "bf16"): "FA on · q8_0 K / bf16 V · ubatch 512", ("f16", "f16"): "FA on · f16 K+V · ubatch 512"}
"""The row of each pair the KV calibration may choose (``app.engine.llama.kv_calibration``)."""


def _verdict(rows: list[list[Any]], chosen: str = DEFAULT) -> tuple[bool, str]:
    """Met when the setting Hearth uses here (``chosen``: the calibrated pair's row, else the
    default) is exact and no other exact setting prefills 2,000 tokens in less than
    ``1 - FASTER_BY`` of its time (closer than that is within this machine's drift between
    rounds); the fastest inexact setting is named, the Library's "Faster prefill" choice."""
    ratio = {row[0]: row[5] for row in rows}
    exact = {row[0] for row in rows if row[6] == "yes"}
    base = ratio.get(chosen, 1.0)
    faster = sorted((r / base, name) for name, r in ratio.items() if name in exact and r < base * (1 - FASTER_BY))
    words = []
    if faster:
        words.append(f"an exact setting is faster than the one Hearth uses ({chosen}): "
                     f"{faster[0][1]} ({faster[0][0]:.3f} ×); `hearth calibrate` times them on this CPU")
    inexact = sorted((r, name) for name, r in ratio.items() if name not in exact)
    if inexact and inexact[0][0] < 1:
        words.append(f"fastest inexact: {inexact[0][1]} ({inexact[0][0]:.3f} ×); flash attention off is "
                     "only a labelled choice (the Library's \"Faster prefill, not bit-identical\", "
                     "`hearth serve --fast-prefill`)")
    text = "; ".join(words)
    return chosen in exact and not faster, text[:1].upper() + text[1:] + "." if text else ""
