"""``hearth cache ls|stats|gc|verify``: inspect and repair the KV cache of a data directory.

Each command opens the store (which reconciles it with the files on disk), writes plain
text to ``out`` and returns a process exit code. ``add_arguments``/``run`` let the app's
CLI mount them as a sub-command; ``main`` runs them standalone
(``python -m app.cache.cli --data-dir DIR ls``).

The environment's trouble is said in one line on stderr, never as a traceback: a
read-only cache directory is listed as it is on disk (with a note that nothing can be
changed there), and a directory that cannot be used at all exits with status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from sqlalchemy.exc import SQLAlchemyError

from app.cache.errors import environment_kind
from app.cache.store import COUNTER_NAMES, CacheStore
from app.units import human_bytes

VERBS = ("ls", "stats", "gc", "verify")


def human_age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


@contextlib.contextmanager
def _open(data_dir: Path, ram_file_dir: Path | None) -> Iterator[CacheStore]:
    store = CacheStore(data_dir, ram_file_dir=ram_file_dir)
    try:
        for problem in store.problems():
            print(f"note: {problem.message}", file=sys.stderr)
        yield store
    finally:
        store.close()


def _clear_errors(cmd: Callable[..., int]) -> Callable[..., int]:
    """The environment's failures as one line on stderr and exit status 2."""

    @functools.wraps(cmd)
    def wrapped(data_dir: Path, out: TextIO, **kwargs: Any) -> int:
        try:
            return cmd(data_dir, out, **kwargs)
        except (OSError, SQLAlchemyError) as exc:
            if environment_kind(exc) is None and not isinstance(exc, OSError):
                raise  # a bug: let it be loud
            print(f"hearth cache: cannot use the cache at {data_dir}: {exc}", file=sys.stderr)
            return 2

    return wrapped


@_clear_errors
def cmd_ls(
    data_dir: Path,
    out: TextIO,
    *,
    model_id: str | None = None,
    ram_file_dir: Path | None = None,
) -> int:
    """One line per entry: key prefix, model, tokens, size, tier, reason, age, hits. A row
    that lost a chunk shows the tokens it still restores, as ``restored/total``."""
    with _open(data_dir, ram_file_dir) as store:
        rows = sorted(store.rows(model_id), key=lambda r: r.last_used, reverse=True)
        served = {r.key: store.served_tokens(r.key) for r in rows}
    now = time.time()
    header = ("KEY", "MODEL", "TOKENS", "SIZE", "TIER", "REASON", "AGE", "HITS", "PIN")
    lines = [header] + [
        (
            r.key.hex()[:12],
            r.model_id or "-",
            _tokens(r.n_tokens, served[r.key]),
            human_bytes(r.size),
            r.tier,
            r.save_reason,
            human_age(now - r.created),
            str(r.hits),
            "*" if r.pinned else "",
        )  # fmt: skip
        for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
        out.write("\n")
    out.write(f"{len(rows)} entries\n")
    partial = sum(1 for r in rows if served[r.key] not in (None, r.n_tokens))
    if partial:
        out.write(f"{partial} of them lost a chunk: they restore only the tokens shown before the '/'\n")
    return 0


def _tokens(n_tokens: int, served: int | None) -> str:
    return str(n_tokens) if served is None or served >= n_tokens else f"{served}/{n_tokens}"


def _write_usage(store: CacheStore, out: TextIO) -> None:
    for tier, (used, quota) in store.tier_usage().items():
        pct = 100 * used / quota if quota else 0.0
        out.write(f"  {tier:<9} {human_bytes(used):>11} / {human_bytes(quota):>11}  {pct:5.1f}%\n")


@_clear_errors
def cmd_stats(data_dir: Path, out: TextIO, *, ram_file_dir: Path | None = None) -> int:
    """Counters (summed over past sessions) and usage per tier."""
    with _open(data_dir, ram_file_dir) as store:
        counters = store.lifetime_counters()
        rows = store.rows()
        chunked = sum(1 for r in rows if r.format == 2)
        stored = sum(used for used, _ in store.tier_usage().values())
        out.write(f"entries: {len(rows)} ({chunked} chunked, {len(rows) - chunked} whole)\n")
        out.write(
            f"stored: {human_bytes(stored)} (the rows hold {human_bytes(sum(r.size for r in rows))}"
            " counting each shared chunk once per row)\n"
        )
        out.write("tier usage:\n")
        _write_usage(store, out)
    out.write("counters:\n")
    names = list(COUNTER_NAMES) + sorted(set(counters) - set(COUNTER_NAMES))
    width = max(len(n) for n in names)
    for name in names:
        out.write(f"  {name:<{width}}  {counters.get(name, 0)}\n")
    return 0


@_clear_errors
def cmd_gc(data_dir: Path, out: TextIO, *, ram_file_dir: Path | None = None) -> int:
    """Apply the tier quotas now (demote, then evict least recently used rows)."""
    with _open(data_dir, ram_file_dir) as store:
        n = store.gc()
        out.write(f"gc: {n} rows demoted or evicted\n")
        _write_usage(store, out)
    return 0


@_clear_errors
def cmd_verify(
    data_dir: Path,
    out: TextIO,
    *,
    ram_file_dir: Path | None = None,
    progress: bool = True,
) -> int:
    """Re-check every blob's CRC and key; bad blobs are removed. Exit 1 if any were bad."""

    def report(done: int, total: int) -> None:
        if progress and total:
            out.write(f"\rverifying {done}/{total}")
            if done == total:
                out.write("\n")
            out.flush()

    with _open(data_dir, ram_file_dir) as store:
        result = store.verify(report)
    out.write(f"verified {result.checked} blobs: {result.ok} ok, {len(result.removed)} removed\n")
    if result.chunks_checked:
        out.write(
            f"checked {result.chunks_checked} chunks; {result.rows_damaged} rows now restore "
            "only up to a lost chunk (the rest is computed again)\n"
        )
    for key in result.removed:
        out.write(f"  removed {key}\n")
    return 1 if result.removed or result.rows_damaged else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``cache`` sub-command's arguments (the data dir is the caller's business)."""
    parser.add_argument("verb", choices=VERBS)
    parser.add_argument("--model", help="ls: only this model's entries")
    parser.add_argument("--ram-file-dir", type=Path, help="override the tmpfs tier directory")
    parser.add_argument("--no-progress", action="store_true", help="verify: no progress line")


def run(args: argparse.Namespace, data_dir: Path, out: TextIO) -> int:
    rf = args.ram_file_dir
    if args.verb == "ls":
        return cmd_ls(data_dir, out, model_id=args.model, ram_file_dir=rf)
    if args.verb == "stats":
        return cmd_stats(data_dir, out, ram_file_dir=rf)
    if args.verb == "gc":
        return cmd_gc(data_dir, out, ram_file_dir=rf)
    return cmd_verify(data_dir, out, ram_file_dir=rf, progress=not args.no_progress)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hearth cache", description=__doc__)
    parser.add_argument("--data-dir", type=Path, required=True)
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run(args, args.data_dir, out or sys.stdout)


if __name__ == "__main__":
    raise SystemExit(main())
