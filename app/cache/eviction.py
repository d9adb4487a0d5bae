"""Quotas and what enforces them: LRU demotion (``ram``/``ram_file`` → ``disk``) and
eviction (from ``disk``), moves between tiers, and row removal.

Each tier has a byte quota. Before bytes land in a tier, least-recently-used rows that are
neither user-pinned nor being loaded make room: from ``ram``/``ram_file`` they are demoted
to ``disk`` (``demotions``), from ``disk`` deleted (``evictions``). Every method here runs
with the store's ``io_lock`` held (it serialises all changes of tier contents, so quotas
hold); the catalog's lock is taken only for the brief in-memory updates.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from app.cache import kvc
from app.cache.catalog import Catalog
from app.cache.counters import Counters
from app.cache.errors import Problems, is_environment_error
from app.cache.journal import Journal
from app.cache.rows import Row
from app.cache.tiers import TIER_DISK, TIERS, Tier

log = logging.getLogger(__name__)

GiB = 1 << 30
DEFAULT_QUOTAS = {"ram": 1 * GiB, "ram_file": 2 * GiB, TIER_DISK: 20 * GiB}


def check_quota(tier: str, quota: int) -> None:
    if tier not in TIERS:
        raise ValueError(f"unknown cache tier {tier!r}; expected one of {TIERS}")
    if not isinstance(quota, int) or isinstance(quota, bool) or quota < 0:
        raise ValueError(f"quota for {tier} must be a byte count >= 0, got {quota!r}")


class Evictor:
    def __init__(
        self,
        catalog: Catalog,
        tiers: dict[str, Tier],
        journal: Journal,
        counters: Counters,
        problems: Problems,
        quotas: dict[str, int] | None = None,
    ) -> None:
        self._catalog = catalog
        self._tiers = tiers
        self._journal = journal
        self._counters = counters
        self._problems = problems
        self.quotas = dict(DEFAULT_QUOTAS)
        for tier, quota in (quotas or {}).items():
            check_quota(tier, quota)
            self.quotas[tier] = quota

    def tier_for(self, wanted: str, size: int) -> str | None:
        """Where a blob of ``size`` bytes can go: the wanted tier, else disk, else nowhere."""
        if size <= self.quotas[wanted]:
            return wanted
        if size <= self.quotas[TIER_DISK]:
            return TIER_DISK
        return None

    def gc(self) -> int:
        """Apply every quota now; returns how many rows were demoted or evicted."""
        before = self._counters.get("evictions") + self._counters.get("demotions")
        for tier in TIERS:
            self.make_room(tier, 0)
        return self._counters.get("evictions") + self._counters.get("demotions") - before

    def make_room(self, tier: str, size: int, protect: frozenset[bytes] = frozenset()) -> bool:
        """Demote/evict LRU rows until ``size`` more bytes fit in ``tier``.

        ``protect``: rows being moved by a caller up the stack. A demotion makes room on disk
        in turn, and must not evict the very row whose move started it.
        """
        quota = self.quotas[tier]
        if size > quota:
            return False
        for cand in self._catalog.lru(tier):
            if self._catalog.usage(tier) + size <= quota:
                break
            row = self._catalog.get(cand.key)
            if row is None or row.tier != tier or row.key in protect:
                continue
            if self._catalog.is_busy(row.key):
                continue
            if tier == TIER_DISK or not self.demote(row, protect):
                if tier != TIER_DISK:
                    log.warning("cache row %s could not be demoted; deleting", row.key.hex())
                self._counters.add("evictions")
                self.remove(row)
        return self._catalog.usage(tier) + size <= quota

    def demote(self, row: Row, protect: frozenset[bytes] = frozenset()) -> bool:
        if self.relocate(row, TIER_DISK, protect) is None:
            return False
        self._counters.add("demotions")
        return True

    def relocate(self, row: Row, dest: str, protect: frozenset[bytes] = frozenset()) -> Row | None:
        """Copy a row's blob to ``dest`` (validated), switch the row over, drop the old copy."""
        try:
            prefix, payload = self._tiers[row.tier].read_parts(row.key)
            kvc.parse_parts(prefix, payload, row.key)
        except (OSError, kvc.CorruptBlob) as exc:
            log.warning("dropping corrupt cache blob %s: %s", row.key.hex(), exc)
            self._counters.add("corrupt_files")
            self.remove(row)
            return None
        if not self.make_room(dest, row.size, protect | {row.key}):
            return None
        try:
            location = self._tiers[dest].write(row.key, prefix, payload)
        except (OSError, kvc.CorruptBlob) as exc:
            self.write_failed(exc, f"moving a cache entry to {dest}")
            return None
        with self._catalog.lock:  # re-read: a load or pin may have updated the row meanwhile
            new = replace(self._catalog.get(row.key) or row, tier=dest, location=location)
            self._catalog.add(new)
        self._tiers[row.tier].delete(row.key)
        self._journal.update(row.key, tier=dest, location=location)
        self._journal.emit("updated", new)
        return new

    def remove(self, row: Row) -> None:
        self._catalog.remove(row.key)
        try:
            self._tiers[row.tier].delete(row.key)
        except OSError as exc:
            log.error("could not delete cache blob %s: %s", row.key.hex(), exc)
        self._journal.delete([row.key])
        self._journal.emit("removed", row.key)

    def write_failed(self, exc: BaseException, doing: str) -> None:
        """Count a failed blob write: the environment's (shown) or, if not, a bug (loud)."""
        if is_environment_error(exc) or isinstance(exc, kvc.CorruptBlob):
            problem = self._problems.note(exc, doing)
            log.error("cache: %s: %s", problem.message, exc)
            self._counters.add("save_errors")
        else:
            log.error("bug while %s", doing, exc_info=exc)
            self._counters.add("internal_errors")
