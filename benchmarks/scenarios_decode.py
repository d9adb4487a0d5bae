"""B1: aggregate decode throughput of Hearth against the raw-bindings loop, N = 1, 2, 4, 8."""

from __future__ import annotations

import time
from collections.abc import Callable

from app.engine import Model
from app.engine.events import Event, TokenId
from app.engine.llama.kv_checks import PROMPTS
from benchmarks.common import Result, config, engine_at, hearth_cells, median, progress
from benchmarks.raw_loop import raw_decode_throughput


def hearth_decode_throughput(model: Model, n_streams: int, n_tokens: int = 64) -> tuple[float, int]:
    """Aggregate decode tok/s once every stream is decoding, measured like the raw loop:
    from the moment the last stream got its first token to the last token of all.
    Returns (tok/s, tokens counted)."""
    stamps: list[list[float]] = [[] for _ in range(n_streams)]

    def recorder(i: int) -> Callable[[Event], None]:
        def on_event(event: Event) -> None:
            if isinstance(event, TokenId):
                stamps[i].append(time.perf_counter())

        return on_event

    streams = [
        # ignore_eos: the raw loop decodes n_tokens whatever it samples; so does this.
        model.infer(model.tokenize(PROMPTS[i]), response_tokens=n_tokens + 1, ignore_eos=True, on_event=recorder(i))
        for i in range(n_streams)
    ]
    for s in streams:
        s.result()
    start = max(ts[0] for ts in stamps)
    end = max(ts[-1] for ts in stamps)
    counted = sum(sum(1 for t in ts if t > start) for ts in stamps)
    return counted / (end - start), counted




B1_ROUNDS = 9
"""Paired rounds per N. Five gave per-round ratios of 0.78–1.81 on a quiet machine (the rate
moved by 2 × between neighbouring runs), so a 3 % goal needs the median of more."""


def b1_decode(path: str, rounds: int = B1_ROUNDS) -> Result:
    res = Result(
        "B1",
        "aggregate decode, N concurrent streams, short prompts, 64 tokens each (greedy)",
        "Hearth ≥ 0.97 × raw at every N",
        ["N", "raw tok/s", "Hearth tok/s", "ratio", "Hearth tokens counted"],
    )
    ratios = []
    cells = hearth_cells(path)
    with engine_at() as engine:
        model = engine.load_model("m", config(path, n_seq_max=8, n_batch=512, cache_enabled=False))
        hearth_decode_throughput(model, 2, 8)  # warm-up
        for n in (1, 2, 4, 8):
            raw: list[float] = []
            ours: list[float] = []
            paired: list[float] = []
            counted = 0
            for r in range(rounds):  # back to back, so machine drift hits both alike
                progress(f"B1 N={n}: round {r + 1}/{rounds}")
                # Interleaved: every other round Hearth runs first, so a drift that favours
                # the second of a pair favours neither side in the median.
                if r % 2:
                    rate, counted = hearth_decode_throughput(model, n, 64)
                    raw.append(raw_decode_throughput(path, n, 64, n_threads=2, type_k=cells[0], type_v=cells[1]))
                else:
                    raw.append(raw_decode_throughput(path, n, 64, n_threads=2, type_k=cells[0], type_v=cells[1]))
                    rate, counted = hearth_decode_throughput(model, n, 64)
                ours.append(rate)
                paired.append(rate / raw[-1])
            # NOTE: the median of per-round ratios: each pair ran seconds apart, so it is far
            # less exposed to this shared machine's drift than a ratio of separate medians.
            ratio = median(paired)
            ratios.append(ratio)
            res.rows.append([n, median(raw), median(ours), ratio, counted])
            res.figures[f"N{n}"] = {"raw_tok_s": median(raw), "hearth_tok_s": median(ours), "ratio": ratio,
                                    "raw_runs": raw, "hearth_runs": ours, "paired_ratios": paired}
    res.met = min(ratios) >= 0.97
    res.note = f"median of {rounds} paired rounds per N (the order alternated); per-round ratios " + "; ".join(
        f"N={n}: {min(f['paired_ratios']):.3f}–{max(f['paired_ratios']):.3f}"
        for n, f in ((int(k[1:]), v) for k, v in res.figures.items())
    )
    return res


def hearth_end_to_end(model: Model, n_streams: int, n_tokens: int = 64) -> float:
    """B1e: N client threads, each sends its prompt and consumes its stream; aggregate tok/s
    from the first submission to the last token any client received."""
    import threading

    last: list[float] = [0.0] * n_streams
    counted = [0] * n_streams
    go = threading.Event()

    def client(i: int) -> None:
        go.wait()
        for event in model.infer(model.tokenize(PROMPTS[i]), response_tokens=n_tokens, ignore_eos=True):
            if isinstance(event, TokenId):
                counted[i] += 1
                last[i] = time.perf_counter()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n_streams)]
    for t in threads:
        t.start()
    start = time.perf_counter()
    go.set()
    for t in threads:
        t.join()
    return sum(counted) / (max(last) - start)


def b1e_end_to_end(path: str, rounds: int = 5) -> Result:
    from app.cache.policy import DESKTOP_POLICY

    res = Result(
        "B1e",
        "end to end as clients see it: N client threads, cache on, submission to last token",
        "Hearth ≥ 0.95 × raw at every N",
        ["N", "raw tok/s", "Hearth tok/s", "ratio"],
    )
    ratios = []
    cells = hearth_cells(path)
    with engine_at() as engine:
        model = engine.load_model("m", config(path, n_seq_max=8, n_batch=512, policy=DESKTOP_POLICY))
        hearth_end_to_end(model, 2, 8)  # warm-up
        for n in (1, 2, 4, 8):
            raw: list[float] = []
            ours: list[float] = []
            paired: list[float] = []
            for r in range(rounds):
                progress(f"B1e N={n}: round {r + 1}/{rounds}")
                raw.append(raw_decode_throughput(path, n, 64, n_threads=2, type_k=cells[0], type_v=cells[1], include_prefill=True))
                ours.append(hearth_end_to_end(model, n, 64))
                paired.append(ours[-1] / raw[-1])
            ratio = median(paired)
            ratios.append(ratio)
            res.rows.append([n, median(raw), median(ours), ratio])
            res.figures[f"N{n}"] = {"raw_tok_s": median(raw), "hearth_tok_s": median(ours), "ratio": ratio,
                                    "paired_ratios": paired}
    res.met = min(ratios) >= 0.95
    res.note = "the raw loop's time includes its one-batch prefill; Hearth's, admission and its prefill"
    return res
