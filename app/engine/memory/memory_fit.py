"""Fits before it loads: what a load needs, what this machine has, and the context chosen.

A load needs the model's weights (mmapped; on a CPU every page is read, so all of them end up
resident), its KV cells (``n_ctx × n_seq_max`` of each attention layer's K and V in their cell
types), each sequence's recurrent state, and llama.cpp's compute and output buffers. These are
the sizes llama.cpp itself logs when it allocates them ("CPU KV buffer size", "compute buffer
size", "output buffer size"; ``tests/integration/engine/test_memory_fit.py`` holds the
estimate to them), read here from the GGUF header before llama.cpp is asked for anything.

What the machine has is ``MemAvailable`` from ``/proc/meminfo``, or less where a cgroup (v2
``memory.max`` / ``memory.current``, v1 ``memory.limit_in_bytes`` / ``memory.usage_in_bytes``,
of this process's cgroup and each one above it) leaves less. Tests point ``HEARTH_MEMINFO``
at a meminfo-style file and ``HEARTH_CGROUP_DIR`` at a directory holding those cgroup files;
nothing else reads these variables.

``choose_fit`` picks ``n_ctx`` and ``n_seq_max`` for a room: the largest context the model
was trained for that fits with the asked sequence count, halving down to ``MIN_AUTO_CTX``;
then fewer sequences; then a smaller context, down to one sequence of 256 tokens. It says what
it chose and why. Nothing here allocates; the engine (``app.engine.memory.memory_budget``) decides.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path

from app.engine.errors import ModelLoadFailed
from app.models.library import entry_from_header, estimate_kv, read_gguf_header
from app.units import human_bytes

MEMINFO_ENV = "HEARTH_MEMINFO"
CGROUP_ENV = "HEARTH_CGROUP_DIR"
UNLIMITED = 1 << 60
"""A cgroup limit at or above this is none (v1 writes 9223372036854771712 for "no limit")."""
MIN_AUTO_CTX = 2048
"""The smallest context the automatic choice keeps the asked sequence count for: below it,
fewer chats of a useful length are better than many short ones."""
LOGIT_BYTES = 4
ROW_ALLOWANCE = 8
"""Per ubatch row, llama.cpp's compute buffer holds the row's logits (``n_vocab`` f32) and the
layer activations it reuses (a few ``n_embd`` f32 vectors); ``ROW_ALLOWANCE × n_embd`` covers
the second for the models measured (SmolLM2 at 512 and 64 rows: 98.25 / 12.83 MiB logged,
105 / 14.1 MiB estimated)."""
BUFFER_SLACK = 1 << 20
def auto_cells(path: str) -> tuple[str, str]:
    """What ``"auto"`` KV cell types are for ``path`` now: the pair a load would get
    (``app.engine.llama.kv_calibration``: calibrated on this machine, else the default pair). A
    calibration that finishes later may pick a larger pair (f16 K+V); that load is fitted
    again."""
    from app.engine.llama.kv_calibration import resolve

    choice = resolve(path, background=False)
    return choice.type_k, choice.type_v


class DoesNotFit(ModelLoadFailed):
    """A load refused by Hearth's own estimate before llama.cpp allocated anything."""

    code = "does_not_fit"

    def __init__(self, message: str, *, short: str | None = None) -> None:
        super().__init__(message)
        self.short = short or message
        """The numbers without the parts: "4,096 tokens × 4 chats needs 474.5 MiB; this
        machine has 260.0 MiB" (a window's error line)."""


# -- what the machine has --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Machine:
    """What this process may still take, and where the number comes from."""

    mem_available: int
    mem_total: int
    cgroup_limit: int | None = None
    cgroup_used: int | None = None

    @property
    def available(self) -> int:
        if self.cgroup_limit is None:
            return self.mem_available
        return max(0, min(self.mem_available, self.cgroup_limit - (self.cgroup_used or 0)))

    def words(self) -> str:
        """"3.1 GB available" and, when a cgroup sets it, its limit and use."""
        text = f"{human_bytes(self.available)} available"
        if self.cgroup_limit is not None and self.available < self.mem_available:
            text += f" (its memory limit is {human_bytes(self.cgroup_limit)}, {human_bytes(self.cgroup_used or 0)} used)"
        return text


def read_machine(meminfo: str | None = None, cgroup_dir: str | None = None, *,
                 proc_cgroup: str = "/proc/self/cgroup", cgroup_root: str = "/sys/fs/cgroup") -> Machine:  # fmt: skip
    """``/proc/meminfo`` (or ``$HEARTH_MEMINFO``) and the tightest cgroup memory limit above
    this process (or the one in ``$HEARTH_CGROUP_DIR``)."""
    fields = _meminfo(meminfo or os.environ.get(MEMINFO_ENV) or "/proc/meminfo")
    total = fields.get("MemTotal", 0)
    available = fields.get("MemAvailable", fields.get("MemFree", 0))
    forced = cgroup_dir or os.environ.get(CGROUP_ENV)
    dirs = [Path(forced)] if forced else _cgroup_dirs(proc_cgroup, cgroup_root)
    limit = used = None
    for d in dirs:
        lim = _read_int(d / "memory.max") or _read_int(d / "memory.limit_in_bytes")
        if lim is None or lim >= UNLIMITED:
            continue
        cur = _read_int(d / "memory.current") or _read_int(d / "memory.usage_in_bytes") or 0
        if limit is None or lim - cur < limit - (used or 0):
            limit, used = lim, cur
    return Machine(available, total, limit, used)


def _meminfo(path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                name, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    out[name.strip()] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    except OSError:
        pass
    return out


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except OSError:
        return None
    if text == "max":
        return UNLIMITED
    return int(text) if text.isdigit() else None


def _cgroup_dirs(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> list[Path]:
    """This process's memory cgroup and every one above it (v2 unified, else v1 memory)."""
    try:
        lines = Path(proc_cgroup).read_text(encoding="ascii").splitlines()
    except OSError:
        return []
    found: list[Path] = []
    for line in lines:
        _, controllers, rel = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        if controllers == "":
            base = Path(root) if (Path(root) / "cgroup.controllers").exists() else Path(root) / "unified"
        elif "memory" in controllers.split(","):
            base = Path(root) / "memory"
        else:
            continue
        here = base / rel.strip("/")
        while True:
            found.append(here)
            if here == base:
                break
            here = here.parent
    return found


# -- what a load needs -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadNeed:
    """Bytes a load takes, in the parts llama.cpp logs."""

    weights: int
    kv: int
    recurrent: int
    buffers: int
    n_ctx: int
    n_seq_max: int
    type_k: str
    type_v: str

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.recurrent + self.buffers

    def words(self) -> str:
        parts = [f"{human_bytes(self.weights)} of weights"]
        if self.kv:
            parts.append(f"{human_bytes(self.kv)} of KV cache ({self.type_k} K + {self.type_v} V, "
                         f"{self.n_ctx:,} × {self.n_seq_max} tokens)")
        if self.recurrent:
            parts.append(f"{human_bytes(self.recurrent)} of recurrent state")
        parts.append(f"{human_bytes(self.buffers)} of compute buffers")
        return " + ".join(parts)


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What a GGUF header says about the memory of its model."""

    entry: object  # app.models.library.ModelEntry
    n_vocab: int
    n_embd: int
    context_length: int | None
    weights: int

    def need(self, n_ctx: int, n_seq_max: int, *, n_batch: int = 512, n_ubatch: int | None = None,
             type_k: str = "q8_0", type_v: str = "f16") -> LoadNeed:  # fmt: skip
        from app.models.library import ModelEntry

        entry = self.entry
        assert isinstance(entry, ModelEntry)
        if type_k == "auto" or type_v == "auto":
            type_k, type_v = auto_cells(str(entry.path))
        total_cells = _pad256(n_ctx * n_seq_max)
        recurrent = entry.recurrent_bytes_per_seq * n_seq_max
        kv = estimate_kv(entry, total_cells, 1, type_k=type_k, type_v=type_v) - entry.recurrent_bytes_per_seq
        rows = min(n_ubatch or min(n_batch, 512), n_batch)
        buffers = rows * (self.n_vocab + ROW_ALLOWANCE * self.n_embd) * LOGIT_BYTES
        buffers += n_seq_max * self.n_vocab * LOGIT_BYTES + BUFFER_SLACK  # the output buffer
        return LoadNeed(self.weights, kv, recurrent, buffers, n_ctx, n_seq_max, type_k, type_v)


def read_shape(path: str | Path) -> ModelShape | None:
    """The memory shape of a GGUF file; None when it cannot be read (llama.cpp says why).
    Remembered by (path, size, mtime): the Library asks for every row it paints."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _read_shape(str(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _read_shape(path: str, _size: int, _mtime_ns: int) -> ModelShape | None:
    try:
        header = read_gguf_header(path)
    except (OSError, ValueError):
        return None
    entry = entry_from_header(Path(path), header)
    tensors = header.tensor_map()
    embd = tensors.get("token_embd.weight") or tensors.get("output.weight")
    n_embd, n_vocab = (embd.shape[0], embd.shape[1]) if embd is not None and len(embd.shape) >= 2 else (0, 0)
    weights = header.file_size - header.data_offset  # the tensors (the header is read, not kept)
    return ModelShape(entry, int(n_vocab), int(n_embd), entry.context_length, weights)


# -- choosing -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fit:
    """The chosen ``n_ctx`` × ``n_seq_max``, what it needs, and why, in words."""

    n_ctx: int
    n_seq_max: int
    need: LoadNeed
    words: str


def refusal(need: LoadNeed, room: int, where: str = "this machine has", *, parts: bool = True) -> str:
    """"needs X, this machine has Y": the words of a refused load (``parts``: what X is made of)."""
    chats = "chat" if need.n_seq_max == 1 else "chats"
    of = f" ({need.words()})" if parts else ""
    return (f"{need.n_ctx:,} tokens × {need.n_seq_max} {chats} needs {human_bytes(need.total)}"
            f"{of}; {where} {human_bytes(room)}")


def choose_fit(shape: ModelShape, room: int, *, n_seq_max: int = 4, n_ctx_max: int | None = None,
               n_batch: int = 512, n_ubatch: int | None = None, type_k: str = "q8_0",
               type_v: str = "f16", where: str = "this machine has") -> Fit:  # fmt: skip
    """The largest context (up to the trained one, ``n_ctx_max`` when given) that fits ``room``
    with ``n_seq_max`` sequences, halving down to ``MIN_AUTO_CTX``; then fewer sequences;
    then a smaller context. ``DoesNotFit`` when one sequence of 256 tokens does not fit."""
    top = n_ctx_max or shape.context_length or 4096
    opts = {"n_batch": n_batch, "n_ubatch": n_ubatch, "type_k": type_k, "type_v": type_v}

    def need(ctx: int, seqs: int) -> LoadNeed:
        return shape.need(ctx, seqs, **opts)  # type: ignore[arg-type]

    ladder = _ladder(top)
    wanted = need(top, n_seq_max)
    whole = "the whole trained context" if top >= (shape.context_length or top) else "what was asked"
    for seqs in range(n_seq_max, 0, -1):
        floor = MIN_AUTO_CTX if seqs > 1 else 256
        for ctx in ladder:
            if ctx < min(floor, top):
                break
            got = need(ctx, seqs)
            if got.total <= room:
                return Fit(ctx, seqs, got, _why(got, wanted, room, whole))
    smallest = need(256, 1)
    raise DoesNotFit(f"does not fit: {refusal(smallest, room, where)}",
                     short=f"does not fit: {refusal(smallest, room, where, parts=False)}")


def _ladder(top: int) -> list[int]:
    """``top``, then halvings of it (multiples of 256) down to 256."""
    out = [top]
    n = 1 << int(math.log2(top)) if top & (top - 1) else top // 2
    while n >= 256:
        if n < out[-1]:
            out.append(n)
        n //= 2
    return out


def _why(got: LoadNeed, wanted: LoadNeed, room: int, whole: str) -> str:
    chose = f"{got.n_ctx:,} tokens × {got.n_seq_max} chat{'s' if got.n_seq_max > 1 else ''}"
    if got.n_ctx == wanted.n_ctx and got.n_seq_max == wanted.n_seq_max:
        return f"{chose}: {whole} fits ({human_bytes(got.total)} of {human_bytes(room)})"
    more = wanted.total - room
    return (f"{chose}; {wanted.n_ctx:,} × {wanted.n_seq_max} would need {human_bytes(more)} more "
            f"({human_bytes(wanted.total)} against {human_bytes(room)})")


def _pad256(n: int) -> int:
    return -(-n // 256) * 256
