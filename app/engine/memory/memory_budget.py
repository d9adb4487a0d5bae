"""Hearth's one memory budget: every part of its resident memory, one cap, and who gives way.

Hearth's resident memory is: the loaded models' weights (mmapped: the pages of their files
that are resident, from ``/proc/self/smaps``), their KV cells, recurrent states and compute
buffers (``app.engine.memory.memory_fit.LoadNeed``, the sizes llama.cpp logs), the cache store's
state memory pool (``StateMemory``), its RAM tier, and a fixed part measured as what the
process holds beyond those (Python, Qt, SQLite, the tokenizer tables). ``MemoryBudget.cap``
caps the total: a setting, else what the process holds plus what the machine has available,
less ``DESKTOP_SHARE`` of the available memory (at least ``DESKTOP_ROOM``) left to the rest of
the desktop. The fixed part is measured when the engine starts (the process before any model)
and, later, as what the process holds beyond the other parts when that is more.

A load (``admit``) is measured against both the cap and the machine, counting the RAM tier
and the pool as room, since they give way first: before llama.cpp is asked for anything the
tier's quota is lowered (rows demoted to disk, as its quota always does) and the pool's free
buffers are let go, as far as the load needs. A load that does not fit even then is refused
with its numbers (``DoesNotFit``) unless forced.

Under pressure (``relieve``: the machine's available memory below ``LOW_WATER``, or the
process above its cap; a watch thread looks every ``WATCH_SECONDS``) the same two give way,
and it is said (a warning in the log, ``notices``, ``shed_bytes``); nothing
running is stopped. The tier's quota comes back once the machine has room again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from app.engine.config import ModelConfig
from app.engine.memory.memory_fit import (
    DoesNotFit,
    Fit,
    LoadNeed,
    Machine,
    choose_fit,
    read_machine,
    read_shape,
    refusal,
)
from app.listeners import Listeners
from app.units import human_bytes

log = logging.getLogger(__name__)

Fitting = Literal["check", "choose", "force"]
"""``check``: refuse a load that does not fit; ``choose``: pick ``n_ctx`` / ``n_seq_max`` that
fit (the config's are the most wanted); ``force``: load whatever the estimate says."""

GiB = 1 << 30
DESKTOP_SHARE = 0.2
DESKTOP_ROOM = 256 << 20
LOW_WATER = 256 << 20
"""Below this much available memory the machine is short: the RAM tier and pools give way."""
WATCH_SECONDS = 2.0
TIER_HEADROOM = 0.05
"""The share of the cap the RAM tier leaves free: the heap grows between two looks of the
watch, and freed rows do not always give their pages back. (B15 with the tier filling the cap
to the byte peaked at the budget itself, 1,430.5 MiB of 1,430.5.)"""
PAGE = 4096


def process_rss() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def resident_of(paths: set[str]) -> dict[str, int]:
    """Resident bytes of each file's mappings in this process (``/proc/self/smaps``)."""
    out = dict.fromkeys(paths, 0)
    current: str | None = None
    try:
        with open("/proc/self/smaps", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line[:1].isupper():  # a mapping's first line; its fields are "Rss:" etc.
                    parts = line.split(None, 5)
                    current = parts[5].strip() if len(parts) == 6 else None
                elif current in out and line.startswith("Rss:"):
                    out[current] += int(line.split()[1]) * 1024
    except OSError:
        pass
    return out


@dataclass(frozen=True, slots=True)
class BudgetParts:
    """One reading of the budget, bytes. ``fixed`` is what the process holds beyond the rest."""

    cap: int
    cap_set: bool
    rss: int
    weights: int
    kv: int
    recurrent: int
    buffers: int
    pool: int
    ram_tier: int
    fixed: int
    available: int
    shed: int
    notices: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["notices"] = list(self.notices)
        return d


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a load would fit now, and the numbers in words."""

    fits: bool
    need: LoadNeed
    room: int
    words: str
    short: str
    """"Does not fit on this machine: needs 474.5 MiB, has 260.0 MiB." (``words``: every part)."""


class MemoryBudget:
    """See the module doc. ``cap``: bytes, None for the automatic share; ``read``: what the
    machine has (tests hand in fakes through ``HEARTH_MEMINFO`` / ``HEARTH_CGROUP_DIR``)."""

    def __init__(self, cap: int | None = None, *, read: Callable[[], Machine] = read_machine) -> None:
        self.cap_setting = cap
        self._read = read
        self.fixed_at_start = process_rss()
        """The process before any model: Python, Qt (when the app made it first), SQLite."""
        self._needs: dict[str, LoadNeed] = {}
        self._paths: dict[str, str] = {}
        self._lock = threading.Lock()
        self._ram_quota: int | None = None  # the tier's own quota while it gives way
        self.shed_bytes = 0
        self.notices: list[str] = []
        self.listeners: Listeners[str] = Listeners()
        """Told each notice as it is made (the desktop app's banner), on the thread that made it."""
        self._stop = threading.Event()
        self._watch: threading.Thread | None = None

    def machine(self) -> Machine:
        return self._read()

    def cap(self, rss: int | None = None, machine: Machine | None = None) -> int:
        if self.cap_setting is not None:
            return self.cap_setting
        rss = process_rss() if rss is None else rss
        available = (machine or self._read()).available
        return max(0, rss + available - max(int(available * DESKTOP_SHARE), DESKTOP_ROOM))

    # -- loads -------------------------------------------------------------------------------

    def admit(self, config: ModelConfig, store: Any, fitting: Fitting = "check") -> tuple[ModelConfig, str | None]:
        """The config to load (``choose``: its ``n_ctx`` / ``n_seq_max`` fitted) and the words
        of the choice; the RAM tier and pool made to give way for it. ``DoesNotFit`` before
        anything is allocated when it does not fit (``check``, ``choose``)."""
        shape = read_shape(config.path)
        if shape is None:  # not a GGUF we can read: llama.cpp will say why
            return config, None
        opts = {"n_batch": config.n_batch, "n_ubatch": config.n_ubatch, "type_k": config.type_k, "type_v": config.type_v}
        machine, rss = self._read(), process_rss()
        room, where, unshed = self._room(store, machine, rss)
        words = None
        if fitting == "choose":
            fit = choose_fit(shape, room, n_seq_max=config.n_seq_max, n_ctx_max=config.n_ctx,
                             where=where, **opts)  # type: ignore[arg-type]
            config, need, words = replace(config, n_ctx=fit.n_ctx, n_seq_max=fit.n_seq_max), fit.need, fit.words
        else:
            need = shape.need(config.n_ctx, config.n_seq_max, **opts)  # type: ignore[arg-type]
            if need.total > room:
                text = refusal(need, room, where)
                if fitting != "force":
                    advice = ". Choose a smaller context or fewer chats"
                    raise DoesNotFit(f"does not fit: {text}{advice}",
                                     short=f"does not fit: {refusal(need, room, where, parts=False)}{advice}")
                words = f"loaded against the estimate: {text}"
                log.warning("%s: %s", config.path, words)
        short = need.total - unshed
        if short > 0 and store is not None:
            self._give_way(store, short, f"to load {config.path.rsplit('/', 1)[-1]}")
        return config, words

    def _room(self, store: Any, machine: Machine, rss: int) -> tuple[int, str, int]:
        """What a load may take now (the RAM tier and pool counted as room: they give way),
        who says so ("this machine has", or the cap setting when it leaves less), and what it
        may take before they give way."""
        sheddable = self._sheddable(store)
        cap, committed = self.cap(rss, machine), self.committed()
        by_machine = machine.available + sheddable
        by_cap = cap - max(rss - sheddable, committed)
        where = "this machine has"
        if self.cap_setting is not None and by_cap < by_machine:
            where = f"Hearth's memory cap of {human_bytes(self.cap_setting)} leaves"
        unshed = min(machine.available, cap - max(rss, committed + sheddable))
        return max(0, min(by_machine, by_cap)), where, unshed

    def verdict(self, path: str, n_ctx: int, n_seq_max: int, *, n_batch: int = 512, store: Any = None) -> Verdict | None:
        """Would this load fit now (the Library asks before anything loads)? None for a file
        whose header cannot be read."""
        shape = read_shape(path)
        if shape is None:
            return None
        need = shape.need(n_ctx, n_seq_max, n_batch=n_batch)
        room, where, _ = self._room(store, self._read(), process_rss())
        fits = need.total <= room
        short = f"needs {human_bytes(need.total)}, {where.replace('this machine ', '')} {human_bytes(room)}"
        if fits:
            words = f"Fits on this machine: {refusal(need, room, where)}."
            return Verdict(True, need, room, words, f"Fits on this machine: {short}.")
        words = f"Does not fit on this machine: {refusal(need, room, where)}."
        return Verdict(False, need, room, words, f"Does not fit on this machine: {short}.")

    def choice(self, path: str, n_ctx: int, n_seq_max: int, *, n_batch: int = 512, store: Any = None) -> Fit | None:
        """What ``load_model(fit="choose")`` would pick now for these settings (the most wanted)."""
        shape = read_shape(path)
        if shape is None:
            return None
        room, where, _ = self._room(store, self._read(), process_rss())
        return choose_fit(shape, room, n_seq_max=n_seq_max, n_ctx_max=n_ctx, n_batch=n_batch, where=where)

    def loaded(self, model_id: str, config: ModelConfig, store: Any = None) -> None:
        shape = read_shape(config.path)
        if shape is None:
            return
        need = shape.need(config.n_ctx, config.n_seq_max, n_batch=config.n_batch, n_ubatch=config.n_ubatch,
                          type_k=config.type_k, type_v=config.type_v)  # fmt: skip
        with self._lock:
            self._needs[model_id], self._paths[model_id] = need, config.path
        self.fit_tier(store)

    def unloaded(self, model_id: str, store: Any = None) -> None:
        with self._lock:
            self._needs.pop(model_id, None)
            self._paths.pop(model_id, None)
        self.fit_tier(store)

    def committed(self) -> int:
        """What the budget holds besides the parts that give way: the fixed part measured at
        the start and every loaded model's estimate (upper bounds: a compute buffer's pages
        are not all touched at once, but they will be)."""
        fixed = min(self.fixed_at_start, process_rss())  # (less when memory held at the start was freed)
        with self._lock:
            return fixed + sum(n.total for n in self._needs.values())

    def fit_tier(self, store: Any) -> None:
        """The RAM tier (and the pool inside its quota) lives in what the cap leaves beside
        ``committed``: its quota is lowered to that (rows demoted to disk), and given back,
        up to the quota it had, once there is room again."""
        if store is None:
            return
        rss = process_rss()  # (what the process holds besides the tier and pool counts too: its heap grows)
        cap = self.cap(rss)
        allowed = max(0, cap - max(self.committed(), rss - self._sheddable(store)) - int(cap * TIER_HEADROOM))
        quota = store.tier_usage()["ram"][1]
        with self._lock:
            own = self._ram_quota if self._ram_quota is not None else quota
            if allowed < own:
                self._ram_quota = own
            else:
                self._ram_quota = None
        want = min(own, allowed)
        if want != quota:
            store.set_quota("ram", want)
            if want < quota:
                log.info("the RAM tier holds %s, what Hearth's memory cap leaves beside the models", human_bytes(want))

    # -- the parts ---------------------------------------------------------------------------

    def parts(self, store: Any) -> BudgetParts:
        machine, rss = self._read(), process_rss()
        with self._lock:
            needs, paths = list(self._needs.values()), set(self._paths.values())
        resident = resident_of(paths)
        weights = sum(resident.values())
        kv = sum(n.kv for n in needs)
        recurrent = sum(n.recurrent for n in needs)
        buffers = sum(n.buffers for n in needs)
        pool = store.memory.kept_bytes if store is not None else 0
        ram = store.tier_usage()["ram"][0] if store is not None else 0
        fixed = max(self.fixed_at_start, rss - weights - kv - recurrent - buffers - pool - ram)
        return BudgetParts(self.cap(rss, machine), self.cap_setting is not None, rss, weights, kv, recurrent,
                           buffers, pool, ram, fixed, machine.available, self.shed_bytes, tuple(self.notices[-5:]))

    # -- giving way --------------------------------------------------------------------------

    @staticmethod
    def _sheddable(store: Any) -> int:
        if store is None:
            return 0
        return int(store.tier_usage()["ram"][0]) + int(store.memory.kept_bytes)

    def _give_way(self, store: Any, wanted: int, why: str) -> int:
        """Let the pool's free buffers go, then lower the RAM tier's quota (rows demoted to
        disk) until ``wanted`` bytes are freed or both are empty. The bytes freed."""
        freed = store.memory.release_free()
        used, quota = store.tier_usage()["ram"]
        if freed < wanted and used:
            with self._lock:
                if self._ram_quota is None:
                    self._ram_quota = quota
            store.set_quota("ram", max(0, used - (wanted - freed)))
            freed += used - store.tier_usage()["ram"][0]
        if freed:
            self.shed_bytes += freed
            text = (f"memory short: {human_bytes(freed)} of cached conversations and buffers let go "
                    f"{why} (the RAM tier moves rows to disk)")
            log.warning(text)
            self.notices.append(f"{time.strftime('%H:%M:%S')} {text}")
            self.listeners.notify(text[0].upper() + text[1:] + ".")
        return freed

    def relieve(self, store: Any) -> int:
        """One look: when the machine is short (available below ``LOW_WATER``) or Hearth is
        over its cap, the RAM tier and the pool give way; when there is room again, the
        tier's quota comes back. The bytes freed."""
        if store is None:
            return 0
        machine, rss = self._read(), process_rss()
        short = max(LOW_WATER - machine.available, rss - self.cap(rss, machine))
        if short > 0:
            return self._give_way(store, short, "because the machine is short of memory")
        if machine.available > 2 * LOW_WATER:  # room again: the tier gets back what the cap allows
            self.fit_tier(store)
        return 0

    def watch(self, store: Callable[[], Any], interval: float = WATCH_SECONDS) -> None:
        """Start the watch thread (once): ``relieve`` every ``interval`` seconds."""
        if self._watch is not None:
            return

        def run() -> None:
            while not self._stop.wait(interval):
                try:
                    self.relieve(store())
                except Exception:  # a failed look costs nothing running
                    log.exception("memory watch")

        self._watch = threading.Thread(target=run, name="memory-watch", daemon=True)
        self._watch.start()

    def close(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.join(timeout=5)


__all__ = ["BudgetParts", "DoesNotFit", "Fitting", "MemoryBudget", "Verdict", "process_rss", "resident_of"]
