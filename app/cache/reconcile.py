"""Start-up reconciliation of the cache database with the blob files on disk.

The files are the truth, the database an index of them. At start-up: temp files of
interrupted writes are deleted; ``ram`` rows (their bytes died with the last process) and
rows whose file is gone are dropped; ``writing`` rows whose file is complete are published
(the crash came between rename and the status update); files without a row are
re-registered from their KVC headers — after a lost or corrupt database, that is all of
them; a file whose header is unreadable or names another key is deleted and counted.

Header checks only: the full CRC check happens when a row is loaded (or in ``verify``), so
start-up stays fast with gigabytes of blobs.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from app.cache import kvc
from app.cache.index import Row
from app.cache.keys import encode_tokens
from app.cache.meta import STATUS_AVAILABLE, row_fields, row_from_fields
from app.cache.tiers import FileTier

if TYPE_CHECKING:
    from app.cache.store import CacheStore

log = logging.getLogger(__name__)


def row_from_file(tier: FileTier, key: bytes) -> Row:
    """A row rebuilt from a blob's header and TLVs; ``CorruptBlob``/``OSError`` if bad."""
    prefix, size = tier.read_prefix(key)
    meta = kvc.parse_meta(prefix, total_size=size)
    if meta.key != key:
        raise kvc.CorruptBlob("file name and contents describe different keys")
    return Row(
        key=key,
        model_id=meta.model_id,
        fingerprint=meta.fingerprint.hex(),
        quant_type=meta.quant_type,
        ctx_hash=meta.ctx_params_hash.hex(),
        n_tokens=len(meta.tokens),
        tokens_le=encode_tokens(meta.tokens),
        tier=tier.name,
        size=size,
        save_reason=meta.save_reason,
        created=float(meta.created),
        last_used=float(meta.last_used),
        hits=meta.hits,
        status=STATUS_AVAILABLE,
        location=tier.location(key),
        checksum=meta.payload_crc32c,
        context_size=meta.context_size,
        prompt_preview=meta.prompt_text[:200],
    )


def reconcile(store: CacheStore) -> None:
    """Bring ``store``'s database, index and files into agreement (constructor only)."""
    # NOTE: a friend of CacheStore: runs before the writer thread exists, under _io_lock.
    counters = store._counters
    tiers = store._file_tiers
    db = store._db
    for tier in tiers.values():
        counters["temp_files_removed"] += tier.remove_temp_files()

    try:
        db_rows: list[dict[str, Any]] = db.all_rows()
    except Exception as exc:
        log.error("cache database unreadable (%s); rebuilding from the blob files", exc)
        db_rows = []
    drop: list[str] = []
    republish: list[dict[str, Any]] = []
    for fields in db_rows:
        home = tiers.get(fields["tier"])
        try:
            key = bytes.fromhex(fields["key"])
        except ValueError:
            drop.append(fields["key"])
            continue
        if home is None or not home.exists(key):
            if home is not None:
                counters["rows_dropped_missing"] += 1
            drop.append(fields["key"])
            continue
        if fields["status"] == STATUS_AVAILABLE:
            row = replace(row_from_fields(fields), location=home.location(key))
        else:
            try:
                row = replace(row_from_file(home, key), pinned=bool(fields["pinned"]))
            except (OSError, kvc.CorruptBlob) as exc:
                log.warning("removing unfinished cache blob %s: %s", key.hex(), exc)
                home.delete(key)
                drop.append(fields["key"])
                continue
            republish.append(row_fields(row))
        _add(store, row)

    new_rows: list[dict[str, Any]] = []
    for tier in tiers.values():
        for key in tier.list_keys():
            known = store._index.get(key)
            if known is not None:
                if known.tier != tier.name:  # stale copy from an interrupted move
                    tier.delete(key)
                continue
            try:
                row = row_from_file(tier, key)
            except (OSError, kvc.CorruptBlob) as exc:
                log.warning("deleting unreadable cache blob %s: %s", key.hex(), exc)
                counters["corrupt_files"] += 1
                tier.delete(key)
                continue
            _add(store, row)
            new_rows.append(row_fields(row))
    counters["rows_reregistered"] += len(new_rows)

    try:
        db.delete(drop)
        db.put_many(republish + new_rows)
    except Exception as exc:
        log.error("cache database update at start-up failed: %s", exc)
    if drop or new_rows:
        log.info(
            "cache reconciled: %d rows, %d dropped, %d re-registered",
            len(store._index), len(drop), len(new_rows),
        )  # fmt: skip


def _add(store: CacheStore, row: Row) -> None:
    store._index.put(row)
    store._usage[row.tier] += row.size
