"""Start-up reconciliation of the cache database with the blob files, as a plan.

The files are the truth, the database an index of them. ``reconcile(tiers, db)`` reads
both and returns a ``Reconciled`` that the store applies: the rows to index; the database
rows to drop — ``ram`` rows (their bytes died with the last process) and rows whose file
is gone; rows to (re)write — ``writing`` rows whose file is complete (the crash came
between rename and the status update) and files without a row, re-registered from their
KVC headers (after a lost or corrupt database, that is all of them); and the files to
delete — unreadable headers, files naming another key, and stale copies left by an
interrupted move. It touches no store state and deletes nothing itself.

Header checks only: the full CRC check happens when a row is loaded (or in ``verify``), so
start-up stays fast with gigabytes of blobs. Temp files of interrupted writes are the
tiers' business (``FileTier.remove_temp_files``), removed by the store before this runs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from app.cache import kvc
from app.cache.keys import encode_tokens
from app.cache.meta import STATUS_AVAILABLE, MetaDB, row_from_fields
from app.cache.rows import Row, make_row
from app.cache.tiers import FileTier

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Reconciled:
    """What start-up found: apply it to the catalog, the database and the tiers."""

    rows: dict[bytes, Row] = field(default_factory=dict)  # the rows to index, by key
    drop_keys: list[str] = field(default_factory=list)  # database rows to delete (hex)
    put_rows: list[Row] = field(default_factory=list)  # database rows to (re)write
    delete_files: list[tuple[str, bytes]] = field(default_factory=list)  # (tier, key)
    counters: dict[str, int] = field(default_factory=dict)

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n


def row_from_file(tier: FileTier, key: bytes) -> Row:
    """A row rebuilt from a blob's header and TLVs; ``CorruptBlob``/``OSError`` if bad."""
    prefix, size = tier.read_prefix(key)
    meta = kvc.parse_meta(prefix, total_size=size)
    if meta.key != key:
        raise kvc.CorruptBlob("file name and contents describe different keys")
    return make_row(
        key=key,
        model_id=meta.model_id,
        fingerprint=meta.fingerprint,
        quant_type=meta.quant_type,
        ctx_hash=meta.ctx_params_hash,
        tokens_le=encode_tokens(meta.tokens),
        tier=tier.name,
        size=size,
        save_reason=meta.save_reason,
        created=float(meta.created),
        last_used=float(meta.last_used),
        hits=meta.hits,
        location=tier.location(key),
        checksum=meta.payload_crc32c,
        context_size=meta.context_size,
        prompt_text=meta.prompt_text,
    )


def reconcile(tiers: Mapping[str, FileTier], db: MetaDB) -> Reconciled:
    """Compare the database with the files of the file tiers; see the module docstring."""
    out = Reconciled()
    try:
        db_rows: list[dict[str, Any]] = db.all_rows()
    except Exception as exc:  # any failure to read is a database to rebuild, never a crash
        log.error("cache database unreadable (%s); rebuilding from the blob files", exc)
        db_rows = []
    for fields in db_rows:
        _check_db_row(tiers, fields, out)
    for tier in tiers.values():
        for key in tier.list_keys():
            _check_file(tier, key, out)
    if out.drop_keys or out.counters.get("rows_reregistered"):
        log.info(
            "cache reconciled: %d rows, %d dropped, %d re-registered",
            len(out.rows), len(out.drop_keys), out.counters.get("rows_reregistered", 0),
        )  # fmt: skip
    return out


def _check_db_row(tiers: Mapping[str, FileTier], fields: dict[str, Any], out: Reconciled) -> None:
    home = tiers.get(fields["tier"])
    try:
        key = bytes.fromhex(fields["key"])
    except ValueError:
        out.drop_keys.append(fields["key"])
        return
    if home is None or not home.exists(key):
        if home is not None:
            out.count("rows_dropped_missing")
        out.drop_keys.append(fields["key"])
        return
    if fields["status"] == STATUS_AVAILABLE:
        out.rows[key] = replace(row_from_fields(fields), location=home.location(key))
        return
    try:
        row = replace(row_from_file(home, key), pinned=bool(fields["pinned"]))
    except (OSError, kvc.CorruptBlob) as exc:
        log.warning("removing unfinished cache blob %s: %s", key.hex(), exc)
        out.delete_files.append((home.name, key))
        out.drop_keys.append(fields["key"])
        return
    out.rows[key] = row
    out.put_rows.append(row)


def _check_file(tier: FileTier, key: bytes, out: Reconciled) -> None:
    known = out.rows.get(key)
    if known is not None:
        if known.tier != tier.name:  # stale copy from an interrupted move
            out.delete_files.append((tier.name, key))
        return
    try:
        row = row_from_file(tier, key)
    except (OSError, kvc.CorruptBlob) as exc:
        log.warning("deleting unreadable cache blob %s: %s", key.hex(), exc)
        out.count("corrupt_files")
        out.delete_files.append((tier.name, key))
        return
    out.rows[key] = row
    out.put_rows.append(row)
    out.count("rows_reregistered")
