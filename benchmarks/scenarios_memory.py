"""B7: memory with the RAM tier at its quota while saves keep coming."""

from __future__ import annotations

import threading
import time

from app.cache.policy import CachePolicy
from benchmarks.common import Result, config, engine_at, progress

MiB = 1 << 20


def rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def b7_memory(path: str, ram_quota: int = 64 * MiB, seconds: float = 20.0) -> Result:
    res = Result(
        "B7",
        f"RAM tier at its quota ({ram_quota // MiB} MiB) while saves continue",
        "tier bytes never above quota; RSS ≤ (RSS after load + RAM quota) × 1.15",
        ["what", "MiB"],
    )
    policy = CachePolicy(min_tokens=16, cold_min_tokens=10**6, cold_max_tokens=2 * 10**6, continued_interval=32)
    with engine_at() as engine:
        store = engine.cache
        store.set_quota("ram", ram_quota)
        model = engine.load_model("m", config(path, n_ctx=1024, n_seq_max=4, policy=policy, tier="ram"))
        model.complete("warm up", response_tokens=2)
        baseline = rss_bytes()
        peak_tier = 0
        peak_rss = baseline
        over = 0
        stop = threading.Event()

        def sample() -> None:
            nonlocal peak_tier, peak_rss, over
            while not stop.is_set():
                used, quota = store.tier_usage()["ram"]
                peak_tier = max(peak_tier, used)
                over += used > quota
                peak_rss = max(peak_rss, rss_bytes())
                time.sleep(0.02)

        sampler = threading.Thread(target=sample)
        sampler.start()
        deadline = time.perf_counter() + seconds
        i = 0
        progress(f"B7: generating with saves every 32 tokens for {seconds:.0f} s")
        while time.perf_counter() < deadline:
            streams = [model.infer(model.tokenize(f"Essay {i}-{j}: the story of"), response_tokens=200) for j in range(4)]
            for s in streams:
                s.result()
            i += 1
        store.flush()
        stop.set()
        sampler.join()
        counters = engine.counters()
    limit = (baseline + ram_quota) * 1.15
    res.rows = [
        ["RAM quota", ram_quota / MiB],
        ["peak RAM-tier bytes", peak_tier / MiB],
        ["RSS after load", baseline / MiB],
        ["peak RSS", peak_rss / MiB],
        ["RSS limit", limit / MiB],
        ["saves (continued)", counters["saves_continued"]],
        ["demotions to disk", counters["demotions"]],
    ]
    res.figures = {"ram_quota": ram_quota, "peak_tier_bytes": peak_tier, "samples_over_quota": over,
                   "rss_after_load": baseline, "peak_rss": peak_rss, "saves": counters["saves_continued"],
                   "demotions": counters["demotions"]}
    res.met = over == 0 and peak_tier <= ram_quota and peak_rss <= limit
    return res
