"""``hearth calibrate [MODEL]`` and the background calibration child: calibrate the KV cell
types on this CPU (``app.engine.llama.kv_calibration``), print the table, keep the choice."""

from __future__ import annotations

import fcntl
import logging
import sys
from collections.abc import Sequence

from app.engine.llama import native_probe
from app.engine.llama.kv_calibration import (
    BUSY,
    CANDIDATES,
    ROUNDS,
    Candidate,
    Measured,
    calibrate,
    results_path,
)


def table(measured: Sequence[Measured]) -> str:
    lines = [f"{'candidate':<18} {'exact':<6} {'prefill ms':>10} {'tick ms':>8} {'turn ms':>8}  failed checks"]
    for m in measured:
        timing = (f"{m.prefill_ms:>10.1f} {m.tick_ms:>8.2f} {m.turn_ms:>8.0f}" if m.exact
                  else f"{'—':>10} {'—':>8} {'—':>8}")
        lines.append(f"{m.candidate.name:<18} {'yes' if m.exact else 'no':<6} {timing}  "
                     f"{', '.join(m.failed) or '—'}" + (f" (|Δlogit| ≤ {m.worst:.3g})" if m.failed else ""))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``hearth calibrate MODEL`` / the background child: calibrate and print the table."""
    import argparse

    parser = argparse.ArgumentParser(prog="hearth calibrate",
                                     description="time the exact KV cell types on this CPU and keep the fastest")
    parser.add_argument("model", nargs="?", help="a GGUF file (default: the bundled SmolLM2-135M-Instruct)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="timed runs per candidate (the best counts)")
    parser.add_argument("--candidates", default=",".join(f"{c.type_k}/{c.type_v}" for c in CANDIDATES),
                        help="K/V pairs to try, e.g. q8_0/f16,q8_0/q8_0")
    args = parser.parse_args(argv)
    try:
        candidates = [Candidate(*pair.split("/", 1)) for pair in args.candidates.split(",")]
    except TypeError:
        parser.error(f"--candidates: K/V pairs such as q8_0/f16, got {args.candidates!r}")
    if args.model is None:
        from app.models.default_model import default_model_path

        args.model = str(default_model_path())
    results_path().parent.mkdir(parents=True, exist_ok=True)
    with open(results_path().with_suffix(".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            print("another KV calibration is running on this machine; try again when it has finished",
                  file=sys.stderr)
            return BUSY
        native_probe.ensure(args.model)
        return _calibrate_and_print(args.model, candidates, args.threads, max(1, args.rounds))


def _calibrate_and_print(model: str, candidates: list[Candidate], threads: int | None, rounds: int) -> int:
    choice, measured = calibrate(model, candidates, n_threads=threads, rounds=rounds)
    print(table(measured))
    print(f"chosen: {choice.why}")
    print(f"kept in {results_path()}")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    raise SystemExit(main(sys.argv[1:]))
