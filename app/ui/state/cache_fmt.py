"""Human-readable numbers for the cache dashboard: sizes, ages, durations, tier names."""

from __future__ import annotations

import time

TIER_LABELS = {"ram": "RAM", "ram_file": "RAM file", "disk": "Disk"}
TIER_HELP = {
    "ram": "Kept inside Hearth's memory: the fastest to reuse, lost when Hearth closes.",
    "ram_file": "Kept in shared memory files (/dev/shm): fast, survives closing Hearth, "
    "lost at reboot.",
    "disk": "Kept in files under the data folder: slower to read, survives restarts.",
}
REASON_LABELS = {
    "cold": "prompt read",
    "continued": "long reply",
    "finish": "turn finished",
    "evict": "slot freed",
    "shutdown": "app closed",
}
REASON_HELP = {
    "cold": "Saved after the model finished reading a long prompt, before it answered.",
    "continued": "Saved part-way through a long generation, so a crash loses little.",
    "finish": "Saved when a reply finished: the whole conversation so far.",
    "evict": "Saved when a conversation had to give up its slot to another one.",
    "shutdown": "Saved while Hearth (or the model) was closing.",
}


def age(ts: float, now: float | None = None) -> str:
    if ts <= 0:
        return "—"
    s = max(0.0, (now or time.time()) - ts)
    if s < 60:
        return "just now" if s < 5 else f"{s:.0f} s ago"
    if s < 3600:
        return f"{s / 60:.0f} min ago"
    if s < 86400:
        return f"{s / 3600:.0f} h ago"
    return f"{s / 86400:.0f} d ago"


def stamp(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts > 0 else "—"


def ms(ns_total: int, count: int) -> str:
    return "—" if count <= 0 else f"{ns_total / count / 1e6:.1f} ms"
