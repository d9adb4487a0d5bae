"""The cache's counters (the seed's names first, docs/design.md §4, then Hearth's extras), thread-safe."""

from __future__ import annotations

import threading

COUNTER_NAMES = (
    "hits_exact", "hits_resume", "hits_longest_prefix", "hits_sticky", "misses",
    "saves_cold", "saves_continued", "saves_finish", "saves_evict", "saves_shutdown",
    "saves_dropped", "duplicate_dropped", "evictions", "demotions", "corrupt_files",
    "pack_total_ns", "load_total_ns", "longest_prefix_probes", "longest_prefix_ns",
    "bytes_ram", "bytes_ram_file", "bytes_disk",
)  # fmt: skip
# Beyond docs/design.md §4: failed writes, saves that fit no tier, blob reads, start-up repairs;
# environment failures of the database (db_errors) apart from bugs (internal_errors).
EXTRA_COUNTERS = (
    "save_errors", "saves_rejected", "loads", "blob_read_ns", "temp_files_removed",
    "rows_dropped_missing", "rows_reregistered", "db_errors", "internal_errors",
    "chunks_reregistered", "chunks_orphaned", "rows_converted",
    # Start-up: database rows and chunks whose values were damaged (dropped, their files
    # registered again); chunked rows none of whose chunks is left (dropped).
    "rows_dropped_damaged", "chunks_dropped_damaged", "rows_dropped_no_chunks",
    # Start-up: entries under a cache file's name that are not regular files (a directory,
    # a symlink, a FIFO), moved to the tier's set-aside folder instead of stopping the start.
    "stray_files_set_aside",
    "hits_live",  # a request started from another live seq's cells
    # Prompt tokens of the requests counted as a hit or a miss, and how many of them were
    # reused instead of prefilled: the token-weighted hit rate (app.conversation.accounting).
    "prompt_tokens", "prompt_tokens_reused",
)  # fmt: skip


class Counters:
    """Named integer counters; ``add`` from any thread, ``snapshot`` for a consistent copy."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(COUNTER_NAMES + EXTRA_COUNTERS, 0)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._values[name] = self._values.get(name, 0) + n

    def add_all(self, deltas: dict[str, int]) -> None:
        with self._lock:
            for name, n in deltas.items():
                self._values[name] = self._values.get(name, 0) + n

    def get(self, name: str) -> int:
        with self._lock:
            return self._values.get(name, 0)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)
