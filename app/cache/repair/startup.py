"""Opening a cache directory: set aside what is not a cache file under a cache file's name
(``FileTier.set_aside_strays``), remove what interrupted writes left, then apply the plan
``reconcile`` makes — index the chunks (a chunk another one extends is superseded on the
way), index the rows and attach each chunked row to its chain (laid over the indexed chunks
as a save lays it, ``ChunkIndex.plan``), delete the files and
database entries the plan drops, drop chunked rows whose first chunk is gone (they would
restore nothing: ``rows_dropped_no_chunks``; a row that lost a later chunk keeps its head and
is listed as damaged), and delete chunks no row uses.

NOTE: an unused chunk younger than ``ORPHAN_GRACE_S`` is kept: another process on the same
data dir (the GUI while ``hearth cache ls`` runs) may be between a save's chunks and its
manifest. It is collected at a later start-up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import replace

from app.cache.blobs.kvc_chunked import CHUNK_TOKENS
from app.cache.blobs.tiers import FileTier
from app.cache.contents.catalog import Catalog
from app.cache.contents.chunk_index import Chunk
from app.cache.counters import Counters
from app.cache.db.journal import Journal
from app.cache.db.meta import MetaDB
from app.cache.repair.reconcile import reconcile
from app.cache.saving.chunked_rows import root_of
from app.cache.space.eviction import Evictor

log = logging.getLogger(__name__)

ORPHAN_GRACE_S = 60.0


def open_files(
    tiers: Mapping[str, FileTier],
    db: MetaDB,
    catalog: Catalog,
    evictor: Evictor,
    journal: Journal,
    counters: Counters,
) -> None:
    for tier in tiers.values():
        tier.set_aside_strays()  # before anything reads or deletes files by name
        counters.add("temp_files_removed", tier.remove_temp_files())
    plan = reconcile(tiers, db)
    for tier_name, name in plan.delete_files:
        try:
            tiers[tier_name].remove(name)
        except OSError as exc:  # a file that cannot be deleted is not listed; never a failed start
            log.error("could not delete cache file %s: %s", name, exc)
    gone: list[Chunk] = []
    with catalog.lock:
        for chunk in plan.chunks.values():
            gone += catalog.chunks.put(chunk)
        for row in plan.rows.values():
            if row.format != 2:
                catalog.add(row)
                continue
            c = row.chunk_size or CHUNK_TOKENS
            own = plan.own_sizes.get(row.key, 0)
            links = catalog.chunks.plan(root_of(row, c), row.tokens_le, c)
            catalog.add(row, own_size=own, links=links)
            chain = [catalog.chunks.get(k) for k in catalog.chunks.chain(row.key)]
            shown = own + sum(ch.size for ch in chain if ch is not None)
            if shown != row.size:
                catalog.add(replace(row, size=shown))
        hollow = [r for r in plan.rows.values() if r.format == 2 and catalog.served(r.key) == 0]
        cutoff = time.time() - ORPHAN_GRACE_S
        for chunk in catalog.chunks.unused():
            if chunk.created < cutoff and catalog.chunks.discard_unused(chunk.key) is not None:
                gone.append(chunk)
                counters.add("chunks_orphaned")
    evictor.delete_chunk_files(gone)
    counters.add_all(plan.counters)
    journal.call("reconciling the database", db.delete, plan.drop_keys)
    journal.call("reconciling the database", db.delete_chunks, plan.drop_chunks)
    journal.put_many(plan.put_rows)
    journal.put_chunks(c for c in plan.put_chunks if c.key not in {g.key for g in gone})
    for row in hollow:  # NOTE: before, such a row stayed listed and every lookup of it missed
        log.warning("dropping cache row %s: none of its chunks is left", row.key.hex())
        evictor.remove(row)
        counters.add("rows_dropped_no_chunks")
    counters.add("stray_files_set_aside", sum(tier.set_aside for tier in tiers.values()))
