"""The KV cell types a model gets: the fastest exact pair, measured on the machine it runs on.

Hearth's KV is exact by construction for cell-type pairs that keep llama.cpp's CPU flash
attention on its one-chunk path (``ModelConfig.type_v`` says why): K and V not both f16 (or
both f32); and, with Hearth's patched build, for f16 K+V too, whose flash attention then takes
one tiled path for every ubatch. Several pairs qualify, and which is fastest depends on the CPU
and the build: on an AMD EPYC (AVX-512 without FP16) q8_0 K + f16 V read prompts fastest until
the tiled path decoded cheaply, and f16 K+V now reads them 1.2 x faster at about the same
decode tick; on an Intel Xeon with AVX-512 FP16/BF16, q8_0 K + f16 V read a 1,500-token prompt
in 23.0 s against 12.9 s for q8_0 K + q8_0 V. So a model whose config says ``type_k = type_v = "auto"`` (the default) gets what a
**calibration** found on this machine:

- each candidate pair (``CANDIDATES``) is loaded on the model and checked for exactness on
  the shapes that break it (``app.engine.llama.kv_checks``: chunked vs whole prompts past 256
  cells, eight prompts batched vs alone, a restore continued next to a neighbour, one token
  a tick next to 2, 4 and 7 others);
- each exact candidate is timed — a 512-token prompt read and decode ticks of four
  300-token sequences, the best of ``ROUNDS`` — and scored as one turn (``turn_ms``: a
  250-token prompt and a 200-token reply);
- the fastest exact one is chosen; the default pair keeps its place unless another is
  faster by more than ``MARGIN`` (closer than that is this machine's noise), or reads
  prompts faster by more than ``MARGIN`` at no cost to decode (``decide``). No candidate
  exact: the default pair, said so.

The result is kept in ``$XDG_CACHE_HOME/hearth/kv-calibration.json`` under a key of the CPU
(model name and flags), the llama.cpp build (its libraries) and the model's kind
(architecture, widths, weight types), so another CPU, another build or another kind of model
calibrates again. A model's first load on a machine uses the default pair and calibrates in
a child process at low priority (``start_background``): the next load gets the choice.
``hearth calibrate MODEL`` (``app.engine.llama.calibrate_cmd``) runs it in the foreground. ``HEARTH_KV_CALIBRATION=off`` keeps
"auto" on the default pair and never calibrates (the test suite sets it; its calibration
tests turn it back on); ``=cached`` uses a calibration made before and never starts one
(``hearth bench`` sets it for itself and the servers it starts).

The chosen types are part of ``ctx_params_hash``, like any cell types: KV saved under one
pair is never restored into a context of another.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.engine.config import DEFAULT_TYPE_K, DEFAULT_TYPE_V
from app.engine.llama import native_probe

log = logging.getLogger(__name__)

AUTO = "auto"
ENV = "HEARTH_KV_CALIBRATION"
FORMAT = 1
ROUNDS = 3
MARGIN = 0.10
"""NOTE: two quiet runs on the AMD EPYC (SmolLM2, 2 threads) put q8_0 K+V at 0.94 x and at
1.07 x q8_0 K / f16 V's turn: their decode ticks (20-23 ms) differ by less than their noise.
A real difference is larger (1.8 x in prefill on the Intel Xeon)."""
TICK_NOISE = 0.10
"""How much slower a pair's decode tick (and turn) may measure and still count as no slower.
NOTE: the same two pairs, measured twice a minute apart on the quiet AMD EPYC (2 threads,
SmolLM2), gave f16 K+V 1.07 x and 0.89 x q8_0 K / f16 V's tick (and 0.84 x, 0.83 x its
prompt read): the ticks of the exact pairs differ by less than the tick's own noise."""
PREFILL_TOKENS = 512
DECODE_STREAMS, DECODE_CONTEXT, DECODE_TICKS = 4, 300, 32
TURN_PROMPT, TURN_REPLY = 250, 200
"""A turn, for scoring: a 250-token prompt read (a new chat's system prompt and message:
Hearth reads a prompt once and reuses it after, so later turns read only their new message)
and a 200-token reply, each of its tokens one decode tick beside three other streams."""


@dataclass(frozen=True, slots=True)
class Candidate:
    type_k: str
    type_v: str

    @property
    def name(self) -> str:
        if self.type_k == self.type_v:
            return f"{self.type_k} K+V"
        return f"{self.type_k} K / {self.type_v} V"


DEFAULT = Candidate(DEFAULT_TYPE_K, DEFAULT_TYPE_V)
CANDIDATES: tuple[Candidate, ...] = (
    DEFAULT, Candidate("q8_0", "q8_0"), Candidate("q8_0", "bf16"), Candidate("f16", "f16"),
)
"""Pairs that keep flash attention on its one-chunk path (K and V not both f16/f32), and f16
K+V, exact only with Hearth's batch-invariant flash attention (``weight_kernels.FA_ENV``, a
patch of Hearth's llama.cpp build): on a llama.cpp without it the checks find it inexact and
it is never chosen."""


@dataclass(slots=True)
class Measured:
    candidate: Candidate
    exact: bool
    failed: list[str] = field(default_factory=list)
    worst: float = 0.0
    prefill_ms: float = 0.0
    """Reading ``PREFILL_TOKENS`` tokens in one ubatch (best of ``ROUNDS``)."""
    tick_ms: float = 0.0
    """One decode tick of ``DECODE_STREAMS`` sequences of ``DECODE_CONTEXT`` cells (best of ``ROUNDS``)."""

    @property
    def turn_ms(self) -> float:
        return self.prefill_ms * TURN_PROMPT / PREFILL_TOKENS + self.tick_ms * TURN_REPLY


@dataclass(frozen=True, slots=True)
class Choice:
    type_k: str
    type_v: str
    why: str
    calibrated: bool
    """False: the default pair, no calibration for this machine and model kind (yet)."""


def decide(measured: Sequence[Measured]) -> tuple[Candidate, str]:
    """The fastest exact candidate and why, in words. The default pair stays unless another
    exact one is faster by more than ``MARGIN`` (by ``turn_ms``), or reads prompts faster by
    more than ``MARGIN`` with a decode tick and a turn no slower than ``TICK_NOISE``: a turn's
    score is mostly its 200 decode ticks, where the pairs differ by little, while a prompt
    read, the time a user waits before the first token, may differ by a third."""
    exact = [m for m in measured if m.exact]
    inexact = [m.candidate.name for m in measured if not m.exact]
    not_exact = f"; not exact here: {', '.join(inexact)}" if inexact else ""
    if not exact:
        return DEFAULT, f"no candidate was exact on this model{not_exact}; the default {DEFAULT.name}"
    default = next((m for m in exact if m.candidate == DEFAULT), None)
    if default is None:
        best = min(exact, key=lambda m: m.turn_ms)
    else:
        better = [m for m in exact if m is not default and _beats(m, default)]
        best = min(better, key=lambda m: m.turn_ms) if better else default
    if default is None or best is default:
        others = [m for m in exact if m is not best]
        if not others:
            return best.candidate, f"exact; the only exact candidate{not_exact}"
        runner = min(others, key=lambda m: m.turn_ms)
        ratio = runner.turn_ms / best.turn_ms if best.turn_ms else 1.0
        return best.candidate, f"exact, fastest on this CPU ({runner.candidate.name} {ratio:.2f} × its time){not_exact}"
    turn = default.turn_ms / best.turn_ms if best.turn_ms else 1.0
    if turn > 1 / (1 - MARGIN):
        return best.candidate, f"exact, {turn:.2f} × faster than {DEFAULT.name} on this CPU{not_exact}"
    read = default.prefill_ms / best.prefill_ms if best.prefill_ms else 1.0
    tick = best.tick_ms / default.tick_ms if default.tick_ms else 1.0
    return best.candidate, (f"exact, reads prompts {read:.2f} × faster than {DEFAULT.name} on this CPU "
                            f"(a decode tick {tick:.2f} × its time){not_exact}")


def _beats(m: Measured, default: Measured) -> bool:
    if m.turn_ms < default.turn_ms * (1 - MARGIN):
        return True
    return (m.prefill_ms < default.prefill_ms * (1 - MARGIN) and m.tick_ms <= default.tick_ms * (1 + TICK_NOISE)
            and m.turn_ms <= default.turn_ms * (1 + TICK_NOISE))


# ----------------------------------------------------------------------------- the key


def _model_kind(path: str) -> dict[str, Any]:
    """The model's architecture, widths and weight types, read once per version of the file
    (the Library asks at every change of a setting)."""
    try:
        st = os.stat(path)
    except OSError:
        return {"weights": []}
    return dict(_model_kind_of(path, st.st_size, st.st_mtime_ns))


@functools.lru_cache(maxsize=64)
def _model_kind_of(path: str, size: int, mtime_ns: int) -> tuple[tuple[str, Any], ...]:
    from app.engine.llama.weight_kernels import gguf_header

    with gguf_header(path) as header:
        if header is None:
            return (("weights", []),)
        kind: dict[str, Any] = {"weights": sorted(header.weight_types())}
        arch = kind["arch"] = header.value("general.architecture")
        if isinstance(arch, str):
            for name in ("embedding_length", "block_count", "attention.head_count",
                         "attention.head_count_kv", "attention.key_length", "attention.value_length"):
                kind[name] = header.value(f"{arch}.{name}")
    return tuple(kind.items())


def calibration_key(path: str) -> tuple[str, dict[str, Any]]:
    """(key, the facts it digests): this CPU, this llama.cpp build and the kernel switches this
    process runs it with (f16 K+V is exact only with batch-invariant flash attention, float
    weights only with batch-invariant matmuls, K-quants only with the tiled matmul off), this
    kind of model."""
    from app.engine.llama.weight_kernels import (
        fa_batch_invariant,
        mm_batch_invariant,
        set_process_kernels,
        tiled_setting,
    )

    set_process_kernels()  # the switches llama.cpp will run with here (set before its first use)
    facts = {"format": FORMAT, "cpu": native_probe.cpu_identity(), "build": native_probe.build_identity(),
             "fa_batch_invariant": fa_batch_invariant(), "mm_batch_invariant": mm_batch_invariant(),
             "tiled_mm": tiled_setting(), "model": _model_kind(path)}
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:24]
    return digest, facts


def results_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hearth" / "kv-calibration.json"


_file_lock = threading.Lock()


def _load_all() -> dict[str, Any]:
    try:
        data = json.loads(results_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save(key: str, entry: dict[str, Any]) -> None:
    with _file_lock:
        data = _load_all()
        data[key] = entry
        path = results_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)


def lookup(path: str) -> Choice | None:
    """This machine's calibrated choice for the kind of model at ``path`` (None: none yet)."""
    key, _ = calibration_key(path)
    entry = _load_all().get(key)
    if not isinstance(entry, dict):
        return None
    try:
        k, v, why = str(entry["type_k"]), str(entry["type_v"]), str(entry["why"])
    except KeyError:
        return None
    if Candidate(k, v) not in CANDIDATES:
        return None  # written by another version with other candidates
    return Choice(k, v, f"{Candidate(k, v).name}: {why}", calibrated=True)


def disabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("off", "0", "no")


def cached_only() -> bool:
    """``HEARTH_KV_CALIBRATION=cached``: use a calibration already made, never start one
    (``hearth bench``: a child calibrating in the background would load the machine it times)."""
    return os.environ.get(ENV, "").strip().lower() == "cached"


_background = threading.Event()


def allow_background() -> None:
    """Let a first load start a calibration child: the long-running processes (the desktop
    app, ``hearth serve``) call this; one-shot commands (``hearth chat``, the self-test) do not."""
    _background.set()


def resolve(path: str, *, flash_attn: bool = True, background: bool = True) -> Choice:
    """The cell types "auto" means for ``path`` now: the calibrated pair, else the default
    (and, unless disabled, a calibration starts in the background for the next load, in a
    process that ``allow_background``).
    Calibrated pairs are flash-attention pairs: with it off, the default (a q8_0 V needs it)."""
    if not flash_attn:
        return Choice(DEFAULT.type_k, DEFAULT.type_v, f"{DEFAULT.name}: the default (flash attention off)", False)
    if not disabled():
        found = lookup(path)
        if found is not None:
            return found
        if background and _background.is_set() and not cached_only():
            start_background(path)
            return Choice(DEFAULT.type_k, DEFAULT.type_v,
                          f"{DEFAULT.name}: the default while this CPU is calibrated for this model", False)
    return Choice(DEFAULT.type_k, DEFAULT.type_v, f"{DEFAULT.name}: the default (not calibrated)", False)


def describe(path: str, flash_attn: bool = True) -> str:
    """What a load of ``path`` gets for "auto" on this machine, in a user's words (the Library)."""
    try:
        choice = resolve(path, flash_attn=flash_attn, background=False)
    except (OSError, ValueError) as e:
        return f"{DEFAULT.name} (the default; this file could not be read for its kind: {e})"
    if choice.calibrated:
        return f"{choice.why}. Calibrated on this CPU (\"hearth calibrate\" measures again)."
    if not flash_attn:
        return f"{DEFAULT.name}: the default, since flash attention is off."
    if disabled():
        return f"{DEFAULT.name}: the default (calibration is off: {ENV}=off)."
    return (f"{DEFAULT.name}: the default until this CPU is calibrated for this kind of model — "
            "in the background at its first load, or now with \"hearth calibrate\".")


# ----------------------------------------------------------------------------- measuring

def _prefill_ms(backend: Any, tokens: list[int]) -> float:
    from app.engine.backend import PrefillOp

    backend.seq_rm(0)
    t0 = time.perf_counter()
    backend.step([PrefillOp(0, tuple(tokens), 0, True)])
    return (time.perf_counter() - t0) * 1000


def _tick_ms(backend: Any, tokens: list[int]) -> float:
    from app.engine.backend import DecodeOp, PrefillOp

    for seq in range(DECODE_STREAMS):
        backend.seq_rm(seq)
    backend.step([PrefillOp(0, tuple(tokens[: DECODE_CONTEXT - 1]), 0, False)])
    for seq in range(1, DECODE_STREAMS):
        backend.seq_cp(0, seq, DECODE_CONTEXT - 1)
    last = tokens[DECODE_CONTEXT - 1]
    backend.step([PrefillOp(seq, (last,), DECODE_CONTEXT - 1, True) for seq in range(DECODE_STREAMS)])
    t0 = time.perf_counter()
    for i in range(DECODE_TICKS):
        backend.step([DecodeOp(seq, None, DECODE_CONTEXT + i, greedy=True) for seq in range(DECODE_STREAMS)])
    return (time.perf_counter() - t0) * 1000 / DECODE_TICKS


def measure(path: str, candidates: Sequence[Candidate] = CANDIDATES, *, n_threads: int | None = None,
            rounds: int = ROUNDS, extra: dict[str, Any] | None = None) -> list[Measured]:
    """Each candidate's exactness checks and, if exact, its timings. ``extra``: more
    ``LlamaBackend`` keyword arguments for every candidate (tests)."""
    from app.engine.llama.kv_checks import PROMPTS, run_checks_on
    from app.engine.llama.llama_backend import LlamaBackend

    out: list[Measured] = []
    for cand in candidates:
        settings = {"n_threads": n_threads, "flash_attn": True, **(extra or {}),
                    "type_k": cand.type_k, "type_v": cand.type_v}
        with LlamaBackend(path, n_ctx_per_seq=1024, n_seq_max=8, n_batch=512, **settings) as backend:
            if (backend.type_k, backend.type_v) != (cand.type_k, cand.type_v):
                out.append(Measured(cand, False, ["not loadable for this model"]))
                continue
            checks = run_checks_on(backend, PROMPTS)
            failed = [name for name, value in checks.items() if isinstance(value, tuple) and not value[0]]
            worst = max(float(value[1]) for value in checks.values() if isinstance(value, tuple))
            got = Measured(cand, not failed, failed, worst)
            if got.exact:
                tokens = backend.tokenize(" ".join(PROMPTS) * 40)
                got.prefill_ms = min(_prefill_ms(backend, tokens[:PREFILL_TOKENS]) for _ in range(rounds))
                got.tick_ms = min(_tick_ms(backend, tokens) for _ in range(rounds))
            out.append(got)
    return out


def calibrate(path: str, candidates: Sequence[Candidate] = CANDIDATES, *, n_threads: int | None = None,
              rounds: int = ROUNDS, extra: dict[str, Any] | None = None) -> tuple[Choice, list[Measured]]:
    """Measure, decide and keep the result for this machine and model kind."""
    key, facts = calibration_key(path)
    measured = measure(path, candidates, n_threads=n_threads, rounds=rounds, extra=extra)
    chosen, why = decide(measured)
    _save(key, {
        "type_k": chosen.type_k, "type_v": chosen.type_v, "why": why,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "model": facts["model"],
        "cpu": native_probe.cpu_identity().partition(" | ")[0],
        "measured": [{**asdict(m), "candidate": m.candidate.name, "turn_ms": m.turn_ms} for m in measured],
    })
    log.info("KV calibration for %s: %s (%s)", path, chosen.name, why)
    return Choice(chosen.type_k, chosen.type_v, f"{chosen.name}: {why}", calibrated=True), measured


# ----------------------------------------------------------------------------- in the background

BACKGROUND_NICE = 19
BUSY = 3
"""The child's exit status when another calibration holds the machine's lock."""
CHILD_OPTIONS: list[str] = []
"""More ``hearth calibrate`` options for the background child (tests: fewer candidates)."""
_running: dict[str, subprocess.Popen[bytes]] = {}
_running_lock = threading.Lock()


def child_command(path: str) -> list[str]:
    if getattr(sys, "frozen", False):
        return [sys.executable, "--kv-calibrate", path, *CHILD_OPTIONS]
    return [sys.executable, "-m", "app.engine.llama.calibrate_cmd", path, *CHILD_OPTIONS]


def start_background(path: str) -> subprocess.Popen[bytes] | None:
    """Calibrate ``path``'s kind in a child process at the lowest CPU priority; None when a
    calibration child of this process is still running (one at a time: a session that loads
    five models calibrates the next kind at a later load). The child's result serves the next
    load; across processes, a lock file lets one calibration run at a time on the machine."""
    with _running_lock:
        if any(child.poll() is None for child in _running.values()):
            return None
        try:
            child = subprocess.Popen(
                child_command(path), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, preexec_fn=functools.partial(os.nice, BACKGROUND_NICE),
                env={**os.environ, ENV: "on"},
            )
        except OSError as e:
            log.warning("KV calibration could not start: %s", e)
            return None
        _running[path] = child
    threading.Thread(target=_reap, args=(path, child), name="kv-calibration", daemon=True).start()
    return child


def _reap(path: str, child: subprocess.Popen[bytes]) -> None:
    _, err = child.communicate()
    if child.returncode == BUSY:
        log.info("KV calibration of %s waits: another one runs on this machine", path)
    elif child.returncode != 0:
        log.warning("KV calibration of %s failed (exit %s): %s", path, child.returncode,
                    err.decode(errors="replace").strip()[-500:])


def wait_for_background(timeout: float | None = None) -> None:
    """Wait for every calibration child this process started (tests, ``hearth calibrate``)."""
    with _running_lock:
        children = list(_running.values())
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout)
