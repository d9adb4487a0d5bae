"""Start-up reconciliation of the cache database with the files, as a plan.

The files are the truth, the database an index of them. ``reconcile(tiers, db)`` reads
both and returns a ``Reconciled`` that the store applies: the rows to index (v1 blobs and
v2 manifests) and the chunks to index; the database rows and chunks to drop — ``ram``
entries (their bytes died with the last process) and entries whose file is gone; rows and
chunks to (re)write in the database — ``writing`` rows whose file is complete (the crash
came between the file and the status update) and files without an entry, re-registered
from their headers (after a lost or corrupt database, that is all of them); and the files
to delete — unreadable headers, files naming another key, stale copies left by an
interrupted move. It touches no store state and deletes nothing itself.

Header checks only: full CRC checks happen when a row is loaded (or in ``verify``), so
start-up stays fast with gigabytes of blobs. The database's own values are checked instead:
a row or chunk whose values are not of their type, or whose key is not the hash of what it
describes (``make_key`` over fingerprint, quant, context hash and tokens; a chunk's over its
parent and tokens), was damaged on disk. It is dropped and counted (``rows_dropped_damaged``,
``chunks_dropped_damaged``), and its file, if any, registered again from its header — so one
bad byte in the database costs at most a pin, never a start, and never serves one prompt's
KV for another's. Values outside the key (hits, times, the preview) are shown as stored. Temp files of interrupted writes are the
tiers' business (``FileTier.remove_temp_files``), removed by the store before this runs;
chunks no row uses are the store's to delete once their rows are attached.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from app.cache.blobs import kvc_chunked, kvc_whole
from app.cache.blobs.tiers import BLOB_SUFFIX, FileTier, name_key, read_blob_prefix
from app.cache.contents.chunk_index import Chunk
from app.cache.contents.rows import Row, make_row
from app.cache.db.meta import STATUS_AVAILABLE, MetaDB, chunk_from_fields, row_from_fields
from app.cache.keys import KEY_LEN, encode_tokens, make_key

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Reconciled:
    """What start-up found: apply it to the catalog, the database and the tiers."""

    rows: dict[bytes, Row] = field(default_factory=dict)  # the rows to index, by key
    own_sizes: dict[bytes, int] = field(default_factory=dict)  # a v2 row's manifest bytes
    chunks: dict[bytes, Chunk] = field(default_factory=dict)  # the chunks to index
    drop_keys: list[str] = field(default_factory=list)  # database rows to delete (hex)
    drop_chunks: list[str] = field(default_factory=list)  # database chunks to delete (hex)
    put_rows: list[Row] = field(default_factory=list)  # database rows to (re)write
    put_chunks: list[Chunk] = field(default_factory=list)  # database chunks to (re)write
    delete_files: list[tuple[str, str]] = field(default_factory=list)  # (tier, file name)
    counters: dict[str, int] = field(default_factory=dict)

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n


def row_from_file(tier: FileTier, key: bytes) -> Row:
    """A row rebuilt from a v1 blob's header and TLVs; ``CorruptBlob``/``OSError`` if bad."""
    prefix, size = read_blob_prefix(tier, key)
    meta = kvc_whole.parse_meta(prefix, total_size=size)
    if meta.key != key:
        raise kvc_whole.CorruptBlob("file name and contents describe different keys")
    return make_row(
        key=key, model_id=meta.model_id, fingerprint=meta.fingerprint,
        quant_type=meta.quant_type, ctx_hash=meta.ctx_params_hash,
        tokens_le=encode_tokens(meta.tokens), tier=tier.name, size=size,
        save_reason=meta.save_reason, created=float(meta.created),
        last_used=float(meta.last_used), hits=meta.hits, location=tier.location(kvc_name(key)),
        checksum=meta.payload_crc32c, context_size=meta.context_size,
        prompt_text=meta.prompt_text, session_id=meta.session_id,
    )  # fmt: skip


def row_from_manifest(tier: FileTier, key: bytes) -> tuple[Row, int]:
    """A chunked row rebuilt from its manifest, and the manifest's size."""
    data = tier.get(kvc_chunked.row_name(key))
    m = kvc_chunked.parse_row(data, key)
    row = make_row(
        key=key, model_id=m.model_id, fingerprint=m.fingerprint, quant_type=m.quant_type,
        ctx_hash=m.ctx_params_hash, tokens_le=m.tokens_le, tier=tier.name, size=len(data),
        save_reason=m.save_reason, created=float(m.created), last_used=float(m.last_used),
        hits=m.hits, location=tier.location(kvc_chunked.row_name(key)), context_size=m.context_size,
        prompt_text=m.preview, session_id=m.session_id, format=2, chunk_size=m.chunk_size,
    )  # fmt: skip
    return row, len(data)


def chunk_from_file(tier: FileTier, key: bytes) -> Chunk:
    header, size = kvc_chunked.read_chunk_header(tier, key)
    return Chunk(
        key=key, parent=header.parent, start=header.start, tokens_le=header.tokens_le,
        chunk_size=header.chunk_size, tier=tier.name, size=size, created=float(header.created),
    )  # fmt: skip


def kvc_name(key: bytes) -> str:
    return key.hex() + BLOB_SUFFIX


def reconcile(tiers: Mapping[str, FileTier], db: MetaDB) -> Reconciled:
    """Compare the database with the files of the file tiers; see the module docstring."""
    out = Reconciled()
    db_rows: list[dict[str, Any]] = []
    db_chunks: list[dict[str, Any]] = []
    try:
        db_rows, db_chunks = db.all_rows(), db.all_chunks()
    except Exception as exc:  # any failure to read is a database to rebuild, never a crash
        log.error("cache database unreadable (%s); rebuilding from the files", exc)
        db.start_over(exc)
        out.count("db_rebuilt")
    for fields in db_rows:
        _check_db_row(tiers, fields, out)
    for fields in db_chunks:
        _check_db_chunk(tiers, fields, out)
    for tier in tiers.values():
        for name in tier.names(BLOB_SUFFIX):
            _check_file(tier, name, out, _v1_row)
        for name in tier.names(kvc_chunked.ROW_SUFFIX):
            _check_file(tier, name, out, _v2_row)
        for name in tier.names(kvc_chunked.CHUNK_SUFFIX):
            _check_chunk_file(tier, name, out)
    if out.drop_keys or out.counters.get("rows_reregistered"):
        log.info(
            "cache reconciled: %d rows, %d dropped, %d re-registered",
            len(out.rows), len(out.drop_keys), out.counters.get("rows_reregistered", 0),
        )  # fmt: skip
    return out


def _file_name(fields: dict[str, Any], key: bytes) -> str:
    return kvc_chunked.row_name(key) if fields.get("format") == 2 else kvc_name(key)


MAX_CHUNK_TOKENS = (1 << 20) - 1
"""The largest chunk size a manifest may name (``kvc_chunked.parse_row``)."""

_ROW_TYPES: dict[str, type | tuple[type, ...]] = {
    "key": str, "model_id": str, "fingerprint": str, "quant_type": str, "ctx_hash": str, "n_tokens": int,
    "tokens": bytes, "tier": str, "location": str, "size": int, "checksum": int, "save_reason": str,
    "context_size": int, "prompt_preview": str, "created": (int, float), "last_used": (int, float), "hits": int,
    "status": str, "pinned": int, "session_id": (str, type(None)), "format": int, "chunk_size": int,
}  # fmt: skip
_CHUNK_TYPES: dict[str, type | tuple[type, ...]] = {
    "key": str, "parent": str, "start": int, "chunk_size": int, "tokens": bytes, "tier": str, "size": int,
    "created": (int, float),
}  # fmt: skip


def _check_types(fields: dict[str, Any], types: dict[str, type | tuple[type, ...]]) -> None:
    for name, kind in types.items():
        value = fields.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"{name} is a {type(value).__name__}")
        if isinstance(value, int | float) and not 0 <= value < 2**62:
            raise ValueError(f"{name} is out of range")


def _hash(value: str) -> bytes:
    if len(value) != 2 * KEY_LEN:
        raise ValueError("a hash that is not 64 hex digits")
    return bytes.fromhex(value)


def sound_row(fields: dict[str, Any]) -> Row:
    """The database row as a ``Row``, or ``ValueError`` when it was damaged (see above)."""
    _check_types(fields, _ROW_TYPES)
    key = _hash(fields["key"])
    tokens = fields["tokens"]
    if len(tokens) % 4 or fields["n_tokens"] != len(tokens) // 4 or fields["format"] not in (1, 2):
        raise ValueError("its token count or format is impossible")
    if make_key(_hash(fields["fingerprint"]), fields["quant_type"], _hash(fields["ctx_hash"]), tokens) != key:
        raise ValueError("its key is not the hash of its model, settings and tokens")
    if fields["format"] == 2 and not 0 < fields["chunk_size"] <= MAX_CHUNK_TOKENS:
        raise ValueError("a chunked row without a chunk size")
    return row_from_fields(fields)


def sound_chunk(fields: dict[str, Any]) -> Chunk:
    """The database chunk as a ``Chunk``, or ``ValueError`` when it was damaged."""
    _check_types(fields, _CHUNK_TYPES)
    tokens = fields["tokens"]
    if len(tokens) % 4 or not 0 < fields["chunk_size"] <= MAX_CHUNK_TOKENS:
        raise ValueError("its token count or chunk size is impossible")
    if kvc_chunked.chunk_key(_hash(fields["parent"]), tokens) != _hash(fields["key"]):
        raise ValueError("its key is not the hash of its parent and tokens")
    return chunk_from_fields(fields)


def _damaged(fields: dict[str, Any], what: str, exc: Exception, out: Reconciled) -> None:
    log.warning("dropping a damaged cache database %s (%s); its file is registered again", what, exc)
    out.count(f"{what}s_dropped_damaged")


def _check_db_row(tiers: Mapping[str, FileTier], fields: dict[str, Any], out: Reconciled) -> None:
    try:
        row = sound_row(fields)
    except (ValueError, TypeError) as exc:
        _damaged(fields, "row", exc, out)
        out.drop_keys.append(fields.get("key"))  # type: ignore[arg-type]  # as stored, to match it
        return
    key = row.key
    home = tiers.get(row.tier)
    name = _file_name(fields, key)
    size = home.size_of(name) if home is not None else None
    if home is None or size is None:
        if home is not None:
            out.count("rows_dropped_missing")
        out.drop_keys.append(fields["key"])
        return
    if fields["status"] == STATUS_AVAILABLE:
        out.rows[key] = replace(row, location=home.location(name), size=size)
        if fields.get("format") == 2:
            out.own_sizes[key] = size
        return
    try:
        row, own = _v2_row(home, key) if fields.get("format") == 2 else _v1_row(home, key)
    except (OSError, kvc_whole.CorruptBlob) as exc:
        log.warning("removing unfinished cache file %s: %s", name, exc)
        out.delete_files.append((home.name, name))
        out.drop_keys.append(fields["key"])
        return
    row = replace(row, pinned=bool(fields["pinned"]))
    out.rows[key] = row
    if own is not None:
        out.own_sizes[key] = own
    out.put_rows.append(row)


def _check_db_chunk(tiers: Mapping[str, FileTier], fields: dict[str, Any], out: Reconciled) -> None:
    try:
        chunk = sound_chunk(fields)
    except (ValueError, TypeError) as exc:
        _damaged(fields, "chunk", exc, out)
        out.drop_chunks.append(fields.get("key"))  # type: ignore[arg-type]
        return
    home = tiers.get(chunk.tier or "")
    size = home.size_of(kvc_chunked.chunk_name(chunk.key)) if home is not None else None
    if home is None or size is None:
        out.drop_chunks.append(fields["key"])
        return
    out.chunks[chunk.key] = replace(chunk, size=size)


def _v1_row(tier: FileTier, key: bytes) -> tuple[Row, int | None]:
    return row_from_file(tier, key), None


def _v2_row(tier: FileTier, key: bytes) -> tuple[Row, int | None]:
    return row_from_manifest(tier, key)


def _check_file(tier: FileTier, name: str, out: Reconciled, read: Any) -> None:
    key = name_key(name)
    if key is None:
        return
    known = out.rows.get(key)
    if known is not None:
        is_v2 = name.endswith(kvc_chunked.ROW_SUFFIX)
        if known.tier != tier.name or (known.format == 2) != is_v2:
            # a stale copy from an interrupted move, or the other format of a row being
            # converted to chunks when the process died: the database's choice wins
            out.delete_files.append((tier.name, name))
        return
    try:
        row, own = read(tier, key)
    except (OSError, kvc_whole.CorruptBlob) as exc:
        log.warning("deleting unreadable cache file %s: %s", name, exc)
        out.count("corrupt_files")
        out.delete_files.append((tier.name, name))
        return
    out.rows[key] = row
    if own is not None:
        out.own_sizes[key] = own
    out.put_rows.append(row)
    out.count("rows_reregistered")


def _check_chunk_file(tier: FileTier, name: str, out: Reconciled) -> None:
    key = name_key(name)
    if key is None:
        return
    known = out.chunks.get(key)
    if known is not None:
        if known.tier != tier.name:
            out.delete_files.append((tier.name, name))
        return
    try:
        chunk = chunk_from_file(tier, key)
    except (OSError, kvc_whole.CorruptBlob) as exc:
        log.warning("deleting unreadable cache chunk %s: %s", name, exc)
        out.count("corrupt_files")
        out.delete_files.append((tier.name, name))
        return
    out.chunks[key] = chunk
    out.put_chunks.append(chunk)
    out.count("chunks_reregistered")
