"""Where each millisecond of a B8 turn goes, between the request and its first token.

    python -m benchmarks.turn_profile [--threads N] [--json FILE]

Runs B8's trace (``benchmarks.scenarios_reuse``) on Hearth with timers around the calls a
turn can spend its time in, each turn followed by its floor as in ``hearth bench``, and prints
per turn: the TTFT, the floor (the backend alone prefilling the same new tokens), and the
TTFT split into

* ``llama_decode``: the prefill ticks' native compute (``LlamaBackend._decode``);
* ``restore``: loading a cached row into the seq (``kv_unpack``) and ``lookup`` (finding and
  reading it: ``CacheStore.find``);
* ``pack`` and ``save``: cold saves on the scheduler thread (``kv_pack``; queueing the save,
  its preview text) — a save's file write is the writer thread's (``writer``, concurrent:
  it competes for the same two cores);
* ``sample``, ``tick other`` (the scheduler's own work in its ticks), ``admit other``
  (admission less lookup and restore), and ``unaccounted`` (the rest: thread hand-offs,
  the loop's burst gathering, event delivery).

B8 sends one turn at a time, so everything the scheduler thread does between a turn's
request and its first token is that turn's. Timers are taken on every thread; each is
clipped to the turn's window.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

Span = tuple[str, int, float, float]  # label, thread id, start, end


@contextmanager
def timers() -> Iterator[list[Span]]:
    """Wrap the calls of the module doc; yields the list of spans they record."""
    from app.cache.store import CacheStore
    from app.engine.cache_hooks import StoreCache
    from app.engine.llama.llama_backend import LlamaBackend
    from app.engine.scheduling.admission import Admitter
    from app.engine.scheduling.scheduler import Scheduler

    spans: list[Span] = []
    wrapped: list[tuple[type, str, Any]] = []

    def wrap(cls: type, name: str, label: str) -> None:
        orig = getattr(cls, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return orig(*args, **kwargs)
            finally:
                spans.append((label, threading.get_ident(), t0, time.perf_counter()))

        wrapped.append((cls, name, orig))
        setattr(cls, name, timed)

    for cls, name, label in [
        (LlamaBackend, "_decode", "llama_decode"), (LlamaBackend, "kv_unpack", "restore"),
        (LlamaBackend, "kv_pack", "pack"), (LlamaBackend, "sample", "sample"),
        (CacheStore, "find", "lookup"), (CacheStore, "_write_job", "writer"),
        (StoreCache, "save", "save"), (Scheduler, "tick", "tick"), (Admitter, "admit", "admit"),
    ]:
        wrap(cls, name, label)
    try:
        yield spans
    finally:
        for cls, name, orig in reversed(wrapped):
            setattr(cls, name, orig)


def _in(spans: list[Span], label: str, lo: float, hi: float) -> float:
    return sum(max(0.0, min(b, hi) - max(a, lo)) for name, _, a, b in spans if name == label) * 1000


def breakdown(spans: list[Span], lo: float, hi: float) -> dict[str, float]:
    """ms of each part of one turn's window ``[lo, hi]`` (see the module doc)."""
    got = {label: _in(spans, label, lo, hi) for label in
           ("llama_decode", "restore", "lookup", "pack", "save", "sample", "tick", "admit", "writer")}
    out = {
        "ttft": (hi - lo) * 1000,
        "llama_decode": got["llama_decode"],
        "restore": got["restore"],
        "lookup": got["lookup"],
        "pack": got["pack"],
        "save": max(0.0, got["save"] - got["pack"]),
        "sample": got["sample"],
        # pack and save inside a tick are a cold save during the prefill; inside admit, none.
        "tick other": max(0.0, got["tick"] - got["llama_decode"] - got["sample"] - got["pack"] - got["save"]),
        "admit other": max(0.0, got["admit"] - got["restore"] - got["lookup"]),
        "writer": got["writer"],
    }
    out["unaccounted"] = out["ttft"] - sum(v for k, v in out.items() if k not in ("ttft", "writer"))
    return out


def profile_b8(path: str) -> dict[str, Any]:
    """B8's trace as ``hearth bench`` runs it: each turn's floor timed right after the turn
    in a process of its own, once the turn's saves are written (so a later turn restores
    from the files, as in the bench, not from a save still in memory)."""
    from benchmarks import floor as floor_module
    from benchmarks import scenarios_reuse as b8

    windows: list[tuple[float, float]] = []
    turn: Callable[..., Any] = b8._hearth_turn

    def recorded(model: Any, prompt: list[int]) -> Any:
        t0 = time.perf_counter()
        result = turn(model, prompt)
        windows.append((t0, t0 + result.ttft_ms / 1000))
        return result

    b8._hearth_turn = recorded
    try:
        with (
            tempfile.TemporaryDirectory(prefix="hearth-profile-") as tmp,
            floor_module.FloorProcess(path, 2048, ["trace"], n_threads=vars(floor_module)["N_THREADS"]) as floor_process,
            timers() as spans,
        ):
            ours = b8.hearth_b8(path, Path(tmp), floor_process)
    finally:
        b8._hearth_turn = turn
    turns = ours["turns"]
    reusable = b8.reusable_per_turn(turns)
    floor = ours["floor_ms"]
    rows = []
    for i, ((lo, hi), (prompt, result), f, r) in enumerate(zip(windows, turns, floor, reusable, strict=True)):
        rows.append({"turn": i + 1, "prompt": len(prompt), "reusable": r, "reused": result.reused, "floor": f,
                     **breakdown(spans, lo, hi)})
    return {"turns": rows}


def _table(rows: list[dict[str, Any]]) -> str:
    cols = ["turn", "prompt", "reusable", "reused", "floor", "ttft", "llama_decode", "restore", "lookup", "pack",
            "save", "sample", "tick other", "admit other", "unaccounted", "writer"]
    lines = [" | ".join(cols)]
    for row in rows:
        lines.append(" | ".join(f"{row[c]:.1f}" if isinstance(row[c], float) else str(row[c]) for c in cols))
    total = {c: sum(row[c] for row in rows) for c in cols[4:]}
    lines.append("sum | | | | " + " | ".join(f"{total[c]:.0f}" for c in cols[4:]))
    lines.append("median | | | | " + " | ".join(f"{statistics.median(row[c] for row in rows):.1f}" for c in cols[4:]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.turn_profile")
    parser.add_argument("--model", help="GGUF (default: SmolLM2-135M-Instruct Q4_1)")
    parser.add_argument("--json", help="write the per-turn figures here")
    parser.add_argument("--threads", type=int, help="llama.cpp threads, Hearth and floor alike (default: the "
                        "benchmarks' 2; 1 on a loaded machine, where two spinning threads measure the OS)")
    args = parser.parse_args(argv)
    from benchmarks import common, floor, scenarios_reuse
    from benchmarks.common import default_model

    if args.threads:
        for module in (common, floor, scenarios_reuse):  # each imported the name
            vars(module)["N_THREADS"] = args.threads

    out = profile_b8(args.model or default_model())
    print(_table(out["turns"]))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
