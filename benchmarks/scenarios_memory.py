"""B7: memory with the RAM tier at its quota while saves keep coming. B15: one memory budget
over loads, chats and a full cache."""

from __future__ import annotations

import threading
import time
from typing import Any

from app.cache.policy import CachePolicy
from benchmarks.common import Result, config, engine_at, progress

MiB = 1 << 20


def rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def b7_memory(path: str, ram_quota: int = 64 * MiB, seconds: float = 20.0, most_seconds: float = 480.0) -> Result:
    """``seconds`` of saves at least, and on until the quota is full (rows have been demoted to
    disk), up to ``most_seconds``: on a busy machine 20 s made too few saves to fill it."""
    res = Result(
        "B7",
        f"RAM tier at its quota ({ram_quota // MiB} MiB) while saves continue",
        "tier rows + state buffers never above quota; RSS ≤ (RSS after load + RAM quota) × 1.15",
        ["what", "MiB"],
    )
    policy = CachePolicy(min_tokens=16, cold_min_tokens=10**6, cold_max_tokens=2 * 10**6, continued_interval=32)
    with engine_at() as engine:
        store = engine.cache
        store.set_quota("ram", ram_quota)
        model = engine.load_model("m", config(path, n_ctx=1024, n_seq_max=4, policy=policy, tier="ram"))
        model.complete("warm up", response_tokens=2)
        baseline = rss_bytes()
        peak_tier = peak_held = 0
        peak_rss = baseline
        over = 0
        stop = threading.Event()

        def sample() -> None:
            nonlocal peak_tier, peak_held, peak_rss, over
            while not stop.is_set():
                used, quota = store.tier_usage()["ram"]
                held = used + store.memory.kept_bytes  # the state buffers live inside the quota
                peak_tier, peak_held = max(peak_tier, used), max(peak_held, held)
                over += held > quota
                peak_rss = max(peak_rss, rss_bytes())
                time.sleep(0.02)

        sampler = threading.Thread(target=sample)
        sampler.start()
        started = time.perf_counter()
        i = 0
        progress(f"B7: generating with saves every 32 tokens for {seconds:.0f} s, and on until the quota is full")

        def going() -> bool:
            spent = time.perf_counter() - started
            return spent < seconds or (spent < most_seconds and store.counters()["demotions"] == 0)

        while going():
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
        ["peak tier + state buffers", peak_held / MiB],
        ["RSS after load", baseline / MiB],
        ["peak RSS", peak_rss / MiB],
        ["RSS limit", limit / MiB],
        ["saves (continued)", counters["saves_continued"]],
        ["demotions to disk", counters["demotions"]],
    ]
    res.figures = {"ram_quota": ram_quota, "peak_tier_bytes": peak_tier, "peak_held_bytes": peak_held,
                   "samples_over_quota": over,
                   "rss_after_load": baseline, "peak_rss": peak_rss, "saves": counters["saves_continued"],
                   "demotions": counters["demotions"]}
    res.met = over == 0 and peak_held <= ram_quota and peak_rss <= limit
    return res


def vm_hwm() -> int:
    """The process's peak resident set so far (``VmHWM``): what no sampler can miss."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


B15_BUDGET = 1_500_000_000
"""1.5 GB (decimal), the budget BENCHMARKS gives B15."""


def b15_budget(path: str, budget: int = B15_BUDGET, ram_quota: int = 192 * MiB, fill_seconds: float = 120.0) -> Result:
    """Load a model, chat, load three more, then keep saving until the RAM tier is full and
    spills to disk, all under ``Engine(memory_cap=budget)``: the loads are fitted to what the
    cap leaves (``fit="choose"``), the RAM tier (with the state buffers inside its quota) lives in
    what the models leave. Peak RSS per phase (sampled every 10 ms) and the process's own peak
    (``VmHWM``) against the budget; every row ever seen is still in RAM or on disk, or was
    evicted by the quotas and counted."""
    import tempfile

    from app.engine import Engine

    res = Result(
        "B15",
        f"a {budget / 1e9:.1f} GB memory budget: load, chat, three more models, fill the cache",
        "peak RSS ≤ the budget in every phase; nothing lost (each row in RAM, on disk, or evicted and counted)",
        ["phase", "peak RSS (MiB)", "budget (MiB)", "models", "RAM tier (MiB)", "its quota (MiB)", "rows"],
    )
    policy = CachePolicy(min_tokens=16, cold_min_tokens=10**6, cold_max_tokens=2 * 10**6, continued_interval=64)
    phase = ["start"]
    peaks: dict[str, int] = {}
    seen: set[bytes] = set()
    stop = threading.Event()
    with tempfile.TemporaryDirectory(prefix="hearth-bench-") as tmp, Engine(tmp, memory_cap=budget) as engine:
        store = engine.cache
        store.set_quota("ram", ram_quota)

        def sample() -> None:
            ticks = 0
            while not stop.is_set():
                rss = rss_bytes()
                peaks[phase[0]] = max(peaks.get(phase[0], 0), rss)
                ticks += 1
                if ticks % 50 == 0:
                    seen.update(r.key for r in store.rows())
                time.sleep(0.01)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        rows: list[list[Any]] = []
        chosen: list[str] = []

        def end_phase(name: str) -> None:
            store.flush()
            seen.update(r.key for r in store.rows())
            rows.append([name, peaks.get(name, 0) / MiB, budget / MiB, len(engine.list_models()),
                         store.tier_usage()["ram"][0] / MiB, store.tier_usage()["ram"][1] / MiB, len(store.rows())])

        def chat(model: Any, tag: str, turns: int, tokens: int) -> None:
            for t in range(turns):
                streams = [model.infer(model.tokenize(f"{tag} chat {j}, turn {t}: tell me a story about a lighthouse"),
                                       response_tokens=tokens) for j in range(model.config.n_seq_max)]
                for s in streams:
                    s.result()

        phase[0] = "load"
        progress("B15: loading the first model (fitted to the budget)")
        cfg = config(path, n_ctx=4096, n_seq_max=4, n_batch=128, policy=policy, tier="ram")
        models = [engine.load_model("m1", cfg, fit="choose")]
        chosen.append(engine.fit_words.get("m1", ""))
        end_phase("load")

        phase[0] = "chat"
        progress("B15: chatting with it")
        chat(models[0], "m1", 2, 48)
        end_phase("chat")

        phase[0] = "three more models"
        for i, (n_ctx, n_seq) in zip((2, 3, 4), ((2048, 2), (2048, 2), (4096, 4)), strict=True):
            progress(f"B15: loading model {i} (fitted to what the budget leaves)")
            more = config(path, n_ctx=n_ctx, n_seq_max=n_seq, n_batch=128, policy=policy, tier="ram")
            models.append(engine.load_model(f"m{i}", more, fit="choose"))
            chosen.append(engine.fit_words.get(f"m{i}", ""))
            chat(models[-1], f"m{i}", 1, 32)
        end_phase("three more models")

        phase[0] = "cache full"
        progress(f"B15: saving until the RAM tier ({ram_quota // MiB} MiB) is full and spills to disk")
        deadline = time.perf_counter() + fill_seconds
        n = 0
        while time.perf_counter() < deadline:
            workers = [threading.Thread(target=chat, args=(m, f"fill {n} {m.id}", 1, 200)) for m in models]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            n += 1
            used, quota = store.tier_usage()["ram"]
            held = used + store.memory.kept_bytes  # (the state buffers live inside the quota)
            if store.counters()["demotions"] > 0 and held >= 0.75 * quota:
                break
        end_phase("cache full")
        stop.set()
        sampler.join()
        counters = store.counters()
        now = {r.key: r.tier for r in store.rows()}
        hwm = vm_hwm()
        memory = engine.memory_status()
    lost = seen - set(now)
    res.rows = rows
    res.note = ("Fitted: " + " | ".join(f"m{i + 1}: {w or 'as asked'}" for i, w in enumerate(chosen))
                + f". Process peak (VmHWM) {hwm / MiB:.1f} MiB. Rows seen {len(seen)}, now {len(now)} "
                f"({sum(t == 'ram' for t in now.values())} in RAM, {sum(t == 'disk' for t in now.values())} on disk); "
                f"evicted by the quotas {counters['evictions']}, demoted {counters['demotions']}, "
                f"rejected {counters['saves_rejected']}, save errors {counters['save_errors']}.")
    res.figures = {"budget": budget, "ram_quota": ram_quota, "peaks": peaks, "vm_hwm": hwm, "rows_seen": len(seen),
                   "rows_now": len(now), "rows_lost_uncounted": max(0, len(lost) - counters["evictions"]),
                   "evictions": counters["evictions"], "demotions": counters["demotions"],
                   "saves_rejected": counters["saves_rejected"], "save_errors": counters["save_errors"],
                   "fits": chosen, "memory_status": memory}
    res.met = (all(p <= budget for p in peaks.values()) and hwm <= budget and len(lost) <= counters["evictions"]
               and set(now.values()) <= {"ram", "disk"} and counters["saves_rejected"] == 0
               and counters["save_errors"] == 0 and counters["demotions"] > 0)
    return res
