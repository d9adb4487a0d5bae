"""The local model library: a catalogue of GGUF files on disk, read from their headers.

The library owns the list of folders to look in (the app's models dir, the folders the user
added, and the bundled default model) and turns every ``*.gguf`` found there into a frozen
``ModelEntry``. Nothing here loads weights: only the GGUF header (metadata key/values and the
tensor table) is read, through a read-only memory map. A file that cannot be read is still
listed, with ``broken`` set to the reason — a scan never raises for a bad file.

NOTE: ``gguf.GGUFReader`` builds a numpy view for every element of every metadata array; for a
model with a 49k-token vocabulary that is ~1M objects and ~5 s per file. The library lists
many files, so it reads the header itself (``read_gguf_header``): the same layout and the
``gguf`` package's enums and block-size table, but arrays longer than a few hundred entries
(tokenizer vocabularies and merges) are skipped instead of materialised.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import re
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf

from app.chat_formats import MARKERS, choose_format

log = logging.getLogger(__name__)

# Arrays with more elements than this are skipped (vocabularies, merges, scores).
MAX_KEPT_ARRAY_LEN = 256
_MAX_TENSORS = 1 << 20
_MAX_KVS = 1 << 20
_MAX_DIMS = 8


class GGUFFormatError(ValueError):
    """The file is not a readable GGUF (bad magic, truncated, corrupt header)."""


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One row of the GGUF tensor table. ``shape`` is in ggml order (fastest dim first)."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # relative to the start of the tensor data section

    @property
    def num_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def num_bytes(self) -> int | None:
        """Bytes of data, or ``None`` for a ggml type this ``gguf`` version does not know."""
        try:
            block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(self.ggml_type)]
        except (ValueError, KeyError):
            return None
        return self.num_elements // block * type_size


@dataclass(frozen=True, slots=True)
class GGUFHeader:
    """Everything before the tensor data: version, metadata and the tensor table."""

    version: int
    metadata: dict[str, Any]
    tensors: tuple[TensorInfo, ...]
    data_offset: int  # absolute file offset of the tensor data section
    file_size: int
    marker_tokens: frozenset[str] = frozenset()
    """The chat formats' control tokens (``app.chat_formats.MARKERS``) that are tokens of the
    vocabulary: found in ``tokenizer.ggml.tokens`` even though that array is skipped."""

    def tensor_map(self) -> dict[str, TensorInfo]:
        return {t.name: t for t in self.tensors}


_SCALAR_FORMATS: dict[int, str] = {
    gguf.GGUFValueType.UINT8: "B",
    gguf.GGUFValueType.INT8: "b",
    gguf.GGUFValueType.UINT16: "H",
    gguf.GGUFValueType.INT16: "h",
    gguf.GGUFValueType.UINT32: "I",
    gguf.GGUFValueType.INT32: "i",
    gguf.GGUFValueType.FLOAT32: "f",
    gguf.GGUFValueType.BOOL: "?",
    gguf.GGUFValueType.UINT64: "Q",
    gguf.GGUFValueType.INT64: "q",
    gguf.GGUFValueType.FLOAT64: "d",
}


class _Cursor:
    """Bounds-checked little/big-endian reads over a memory map."""

    def __init__(self, buf: mmap.mmap, endian: str) -> None:
        self.buf = buf
        self.pos = 0
        self.endian = endian

    def unpack(self, fmt: str) -> Any:
        fmt = self.endian + fmt
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise GGUFFormatError("truncated header")
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def skip(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFFormatError("truncated header")
        self.pos += n

    def string(self) -> str:
        n = self.unpack("Q")
        if self.pos + n > len(self.buf):
            raise GGUFFormatError("truncated header (string runs past the end of the file)")
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype in _SCALAR_FORMATS:
            return self.unpack(_SCALAR_FORMATS[vtype])
        if vtype == gguf.GGUFValueType.STRING:
            return self.string()
        if vtype == gguf.GGUFValueType.ARRAY:
            etype = self.unpack("I")
            count = self.unpack("Q")
            if count > MAX_KEPT_ARRAY_LEN:
                self._skip_array(etype, count)
                return None
            return [self.value(etype) for _ in range(count)]
        raise GGUFFormatError(f"unknown metadata value type {vtype}")

    def _skip_array(self, etype: int, count: int) -> None:
        if etype in _SCALAR_FORMATS:
            self.skip(struct.calcsize(_SCALAR_FORMATS[etype]) * count)
        elif etype == gguf.GGUFValueType.STRING:
            fmt = self.endian + "Q"
            buf, pos, end = self.buf, self.pos, len(self.buf)
            for _ in range(count):
                if pos + 8 > end:
                    raise GGUFFormatError("truncated header")
                pos += 8 + struct.unpack_from(fmt, buf, pos)[0]
            if pos > end:
                raise GGUFFormatError("truncated header")
            self.pos = pos
        else:
            for _ in range(count):
                self.value(etype)


def read_gguf_header(path: Path | str) -> GGUFHeader:
    """Read a GGUF file's metadata and tensor table without touching the tensor data.

    Raises ``GGUFFormatError`` (a ``ValueError``) for anything that is not a complete GGUF,
    including a file whose tensor data is cut short, and ``OSError`` when it cannot be opened.
    """
    path = Path(path)
    with path.open("rb") as f:
        file_size = path.stat().st_size
        if file_size == 0:
            raise GGUFFormatError("empty file")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(buf, file_size)


def _parse(buf: mmap.mmap, file_size: int) -> GGUFHeader:
    if file_size < 24 or bytes(buf[:4]) != b"GGUF":
        raise GGUFFormatError("not a GGUF file (bad magic)")
    (version,) = struct.unpack_from("<I", buf, 4)
    endian = "<"
    if version & 0xFFFF == 0:  # written on a big-endian host
        endian = ">"
        (version,) = struct.unpack_from(">I", buf, 4)
    if version not in (2, 3):
        raise GGUFFormatError(f"unsupported GGUF version {version}")
    cur = _Cursor(buf, endian)
    cur.pos = 8
    n_tensors = cur.unpack("Q")
    n_kv = cur.unpack("Q")
    if n_tensors > _MAX_TENSORS or n_kv > _MAX_KVS:
        raise GGUFFormatError("corrupt header (implausible tensor or key count)")
    metadata: dict[str, Any] = {}
    markers: frozenset[str] = frozenset()
    for _ in range(n_kv):
        key = cur.string()
        start = cur.pos
        metadata[key] = cur.value(cur.unpack("I"))
        if key == "tokenizer.ggml.tokens":
            markers = _markers_in(buf, start, cur.pos, endian)
    tensors = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.unpack("I")
        if n_dims > _MAX_DIMS:
            raise GGUFFormatError(f"corrupt tensor table ({name!r} has {n_dims} dims)")
        shape = tuple(cur.unpack("Q") for _ in range(n_dims))
        tensors.append(TensorInfo(name, shape, cur.unpack("I"), cur.unpack("Q")))
    alignment = metadata.get(gguf.Keys.General.ALIGNMENT) or gguf.GGUF_DEFAULT_ALIGNMENT
    if not isinstance(alignment, int) or alignment <= 0:
        raise GGUFFormatError(f"corrupt header (alignment {alignment!r})")
    data_offset = -(-cur.pos // alignment) * alignment
    needed = data_offset
    for t in tensors:
        n = t.num_bytes
        if n is not None:
            needed = max(needed, data_offset + t.offset + n)
    if needed > file_size:
        raise GGUFFormatError(
            f"truncated: the file has {file_size} bytes but its tensors need {needed}"
        )
    return GGUFHeader(version, metadata, tuple(tensors), data_offset, file_size, markers)


def _markers_in(buf: mmap.mmap, start: int, end: int, endian: str) -> frozenset[str]:
    """The chat formats' control tokens among the token strings stored in ``buf[start:end]``
    (each stored as its length, then its bytes: a match must be a whole token)."""
    found = set()
    for marker in MARKERS:
        raw = marker.encode()
        if buf.find(struct.pack(endian + "Q", len(raw)) + raw, start, end) >= 0:
            found.add(marker)
    return frozenset(found)


# -- quantisation names -------------------------------------------------------------------

_QUANT_RE = re.compile(
    r"(?<![A-Za-z0-9])("
    r"IQ[1-4]_(?:XXS|XS|NL|S|M)"
    r"|Q[2-8]_K(?:_[SML]|_XL)?"
    r"|Q[4-8]_[01]"
    r"|TQ[12]_0"
    r"|MXFP4(?:_MOE)?"
    r"|BF16|F16|F32|FP16|FP32"
    r")(?![A-Za-z0-9])",
    re.IGNORECASE,
)


def quant_from_filename(name: str) -> str | None:
    """The quantisation named in a GGUF file path, lower-case: ``…-Q4_K_M.gguf`` → ``"q4_k_m"``.

    The last match wins (``model-f16-Q8_0.gguf`` is a Q8_0 file); ``fp16``/``fp32`` are
    normalised to ``f16``/``f32``.
    """
    matches = _QUANT_RE.findall(name)
    if not matches:
        return None
    q: str = matches[-1].lower()
    return {"fp16": "f16", "fp32": "f32"}.get(q, q)


def quant_from_file_type(file_type: int | None) -> str | None:
    """``general.file_type`` → ``"q4_1"`` etc. (``LlamaFileType.MOSTLY_Q4_1``)."""
    if file_type is None:
        return None
    try:
        name = gguf.LlamaFileType(file_type).name
    except ValueError:
        return None
    if name == "GUESSED":
        return None
    return name.removeprefix("MOSTLY_").removeprefix("ALL_").lower()


def format_param_count(n: int) -> str:
    """``134515008`` → ``"135M"``, in the style of ``general.size_label``."""
    for unit, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f}{unit}" if value >= 10 else f"{value:.1f}{unit}"
    return str(n)


# -- catalogue entries --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One GGUF file in the library. ``broken`` is the reason it cannot be used, or ``None``."""

    path: Path
    name: str  # the file name without ".gguf": what people recognise
    architecture: str | None = None
    num_params: int | None = None  # exact, summed over the tensor table
    size_label: str | None = None  # "135M": general.size_label, else derived from num_params
    quant: str | None = None  # "q4_1", "q4_k_m", … (file_type, else the filename)
    context_length: int | None = None  # <arch>.context_length (trained)
    size_bytes: int = 0
    has_chat_template: bool = False
    chat_format: str | None = None
    """For a file without a chat template: the built-in format chosen by its architecture and
    vocabulary (``app.chat_formats``), None when none fits (it cannot chat as it is)."""
    is_adapter: bool = False  # general.type == "adapter" (a LoRA, not a model)
    is_default: bool = False  # the bundled SmolLM2 model
    n_layer: int | None = None
    n_head_kv: int | None = None
    head_dim_k: int | None = None
    head_dim_v: int | None = None
    kv_heads_per_layer: tuple[int, ...] = ()  # KV heads of each layer; 0: a recurrent layer (hybrids)
    recurrent_bytes_per_seq: int = 0  # the f32 recurrent state a sequence keeps, whatever its length
    general_name: str | None = None  # general.name from the metadata
    memory_kind: str = "attention"  # attention | sliding_window | recurrent | hybrid (see below)
    broken: str | None = None

    @property
    def is_broken(self) -> bool:
        return self.broken is not None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


RECURRENT_ARCHITECTURES = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
"""llama.cpp's recurrent architectures (``llm_arch_is_recurrent`` in the vendored source)."""
HYBRID_ARCHITECTURES = frozenset({
    "jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h",
    "nemotron_h_moe", "qwen3next", "kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next", "qwen35",
    "qwen35moe", "qwen4exp", "deepseek4", "minimax-01",
})  # fmt: skip
"""llama.cpp's hybrid (recurrent + attention) architectures (``llm_arch_is_hybrid``)."""
INTERVAL_HYBRIDS = frozenset({"qwen3next", "qwen35", "qwen35moe", "qwen4exp"})
"""Hybrids whose attention layers are every ``full_attention_interval``-th (default 4)."""


def memory_kind(arch: str | None, n_swa: int | None) -> str:
    """The memory type a model will load with, from its metadata (the engine's
    ``MemoryCaps.kind`` says it for sure once loaded): what its KV reuse can be."""
    if arch in HYBRID_ARCHITECTURES:
        return "hybrid"
    if arch in RECURRENT_ARCHITECTURES:
        return "recurrent"
    return "sliding_window" if n_swa else "attention"


def _kv_heads_per_layer(arch: str | None, md: dict[str, Any], n_layer: int | None, n_head_kv: int | None) -> tuple[int, ...]:
    """``attention.head_count_kv`` per layer: an array in most hybrids (0 marks a recurrent
    layer); one number for every layer otherwise, except in the hybrids that say which layers
    attend by ``full_attention_interval`` (every n-th; 4 when absent, as llama.cpp reads them)."""
    value = md.get(f"{arch}.attention.head_count_kv")
    if isinstance(value, list | tuple):
        heads = [_int_or_none(v) for v in value]
        return tuple(h or 0 for h in heads) if all(h is not None for h in heads) else ()
    if not n_layer or not n_head_kv:
        return ()
    interval = _int_or_none(md.get(f"{arch}.full_attention_interval"))
    if interval is None and arch in INTERVAL_HYBRIDS:
        interval = 4
    if interval and interval > 0 and arch in HYBRID_ARCHITECTURES:
        return tuple(n_head_kv if (i + 1) % interval == 0 else 0 for i in range(n_layer))
    return (n_head_kv,) * n_layer


def _recurrent_bytes_per_seq(arch: str | None, md: dict[str, Any], kv_heads: tuple[int, ...]) -> int:
    """The f32 recurrent state of one sequence (llama.cpp's ``n_embd_r`` + ``n_embd_s`` per
    recurrent layer, ``llama_memory_recurrent``): the conv/shift state and the SSM state.
    0 for attention-only models and for layouts this does not know."""
    if arch not in RECURRENT_ARCHITECTURES and arch not in HYBRID_ARCHITECTURES:
        return 0

    def get(key: str) -> int:
        return _int_or_none(md.get(f"{arch}.{key}")) or 0

    n_layer, n_embd = get("block_count"), get("embedding_length")
    layers = sum(1 for h in kv_heads if h == 0) if kv_heads else n_layer
    if get("shortconv.l_cache"):  # lfm2: a short convolution's last tokens
        per_layer = n_embd * (get("shortconv.l_cache") - 1)
    elif get("wkv.head_size"):  # rwkv: two token shifts and the wkv state
        per_layer = 2 * n_embd + n_embd * get("wkv.head_size")
    else:  # mamba and the SSM hybrids
        d_conv, d_inner, d_state = get("ssm.conv_kernel"), get("ssm.inner_size"), get("ssm.state_size")
        per_layer = max(d_conv - 1, 0) * (d_inner + 2 * get("ssm.group_count") * d_state) + d_state * d_inner
    return layers * per_layer * 4


def entry_from_header(path: Path, header: GGUFHeader, *, is_default: bool = False) -> ModelEntry:
    """Build a ``ModelEntry`` from an already-read header."""
    md = header.metadata
    arch = md.get("general.architecture")
    arch = arch if isinstance(arch, str) else None

    def arch_int(key: str) -> int | None:
        return _int_or_none(md.get(f"{arch}.{key}")) if arch else None

    num_params = sum(t.num_elements for t in header.tensors) or None
    size_label = md.get("general.size_label")
    if not isinstance(size_label, str) or not size_label:
        size_label = format_param_count(num_params) if num_params else None
    quant = quant_from_file_type(_int_or_none(md.get("general.file_type")))
    quant = quant or quant_from_filename(path.name)

    n_head = arch_int("attention.head_count")
    n_head_kv = arch_int("attention.head_count_kv") or n_head
    n_embd = arch_int("embedding_length")
    head_dim = n_embd // n_head if n_embd and n_head else None
    general_name = md.get("general.name")
    kv_heads = _kv_heads_per_layer(arch, md, arch_int("block_count"), n_head_kv)
    has_template = isinstance(md.get("tokenizer.chat_template"), str)
    chat_format = None if has_template else choose_format(arch, header.marker_tokens.__contains__)
    return ModelEntry(
        path=path,
        name=path.stem,
        general_name=general_name if isinstance(general_name, str) else None,
        architecture=arch,
        num_params=num_params,
        size_label=size_label,
        quant=quant,
        context_length=arch_int("context_length"),
        size_bytes=header.file_size,
        has_chat_template=has_template,
        chat_format=chat_format,
        is_adapter=md.get("general.type") == "adapter",
        is_default=is_default,
        n_layer=arch_int("block_count"),
        n_head_kv=n_head_kv,
        head_dim_k=arch_int("attention.key_length") or head_dim,
        head_dim_v=arch_int("attention.value_length") or head_dim,
        kv_heads_per_layer=kv_heads,
        recurrent_bytes_per_seq=_recurrent_bytes_per_seq(arch, md, kv_heads),
        memory_kind=memory_kind(arch, arch_int("attention.sliding_window")),
    )


def read_entry(path: Path | str, *, is_default: bool = False) -> ModelEntry:
    """Read one GGUF file into a ``ModelEntry``; never raises for a bad file."""
    path = Path(path)
    try:
        return entry_from_header(path, read_gguf_header(path), is_default=is_default)
    except (GGUFFormatError, OSError, ValueError, UnicodeDecodeError) as e:
        reason = str(e) or type(e).__name__
        if isinstance(e, OSError):
            reason = f"unreadable: {e.strerror or e}"
        size = 0
        with contextlib.suppress(OSError):
            size = path.stat().st_size
        log.info("broken model file %s: %s", path, reason)
        return ModelEntry(path=path, name=path.stem, size_bytes=size, broken=reason,
                          quant=quant_from_filename(path.name), is_default=is_default)


CELL_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32, "q4_1": 20 / 32, "q4_0": 18 / 32}
"""Bytes a KV value takes in each cell type llama.cpp accepts (blocks of 32 for the quants)."""
DEFAULT_TYPE_K, DEFAULT_TYPE_V = "q8_0", "f16"  # the engine's defaults (app.engine.config)


def estimate_kv(entry: ModelEntry, n_ctx: int, n_seq_max: int = 1, *, type_k: str = DEFAULT_TYPE_K,
                type_v: str = DEFAULT_TYPE_V) -> int:  # fmt: skip
    """Bytes of the model's memory for ``n_seq_max`` sequences of ``n_ctx`` tokens, as llama.cpp
    allocates it: the attention KV (``n_ctx · n_seq_max`` cells — ``n_ctx`` is per sequence,
    docs/design.md §1 — of each attention layer's ``n_head_kv · head_dim`` K and V values in their cell
    types; sliding-window layers hold every cell too, ``swa_full``) plus each sequence's
    fixed recurrent state (recurrent and hybrid models)."""
    if n_ctx <= 0 or n_seq_max <= 0:
        raise ValueError("n_ctx and n_seq_max must be positive")
    kv = 0
    if entry.kv_heads_per_layer and entry.head_dim_k and entry.head_dim_v:
        per_head = entry.head_dim_k * CELL_BYTES[type_k] + entry.head_dim_v * CELL_BYTES[type_v]
        kv = round(sum(entry.kv_heads_per_layer) * per_head * n_ctx * n_seq_max)
    return kv + entry.recurrent_bytes_per_seq * n_seq_max


def estimate_memory(entry: ModelEntry, n_ctx: int, n_seq_max: int = 1) -> int:
    """Bytes a load is expected to need: the weights plus the memory of ``estimate_kv`` in
    the default cell types. Compute buffers are not included; they are small next to either
    term for the models a desktop runs."""
    return entry.size_bytes + estimate_kv(entry, n_ctx, n_seq_max)


def memory_words(entry: ModelEntry, n_ctx: int, n_seq_max: int) -> str:
    """What ``estimate_kv`` counts, in words: "KV cache (q8_0 K + f16 V, 4,096 × 2 tokens)",
    "recurrent state (fixed, 2 sequences)", or both for a hybrid."""
    parts = []
    if any(entry.kv_heads_per_layer):
        attn = sum(1 for h in entry.kv_heads_per_layer if h)
        plural = "s" if attn > 1 else ""
        layers = f" of its {attn} attention layer{plural}" if attn < len(entry.kv_heads_per_layer) else ""
        parts.append(f"KV cache{layers} ({DEFAULT_TYPE_K} K + {DEFAULT_TYPE_V} V, {n_ctx:,} × {n_seq_max} tokens)")
    if entry.recurrent_bytes_per_seq:
        seqs = "1 sequence" if n_seq_max == 1 else f"{n_seq_max} sequences"
        parts.append(f"recurrent state (fixed whatever the length, {seqs})")
    return " and ".join(parts) or "model memory (unknown layout)"


# -- the library ---------------------------------------------------------------------------


def _default_model_path() -> Path | None:
    from app.models.default_model import default_model_path

    try:
        return default_model_path()
    except FileNotFoundError as e:
        log.warning("default model unavailable: %s", e)
        return None


class ModelLibrary:
    """The catalogue: ``models_dir`` plus user-added folders and files plus the bundled default model.

    ``scan()`` re-reads the folders; entries are cached by (path, size, mtime) so a rescan only
    reads headers of files that changed. Safe to call from a worker thread.
    """

    def __init__(
        self,
        models_dir: Path | str,
        extra_dirs: Iterable[Path | str] = (),
        *,
        include_default: bool = True,
        extra_files: Iterable[Path | str] = (),
        on_change: Callable[[ModelLibrary], None] | None = None,
    ) -> None:
        """``extra_dirs`` / ``extra_files``: the folders and single files the user added
        (``add_dir``, ``add_file``); ``on_change(library)`` runs after each addition or removal,
        so the app can remember them across restarts."""
        self.models_dir = Path(models_dir)
        self._extra_dirs: list[Path] = []
        self._extra_files: list[Path] = []
        self._include_default = include_default
        self._lock = threading.Lock()
        self._cache: dict[Path, tuple[int, int, ModelEntry]] = {}
        self._on_change: Callable[[ModelLibrary], None] | None = None
        for d in extra_dirs:
            self.add_dir(d)
        for f in extra_files:
            self.add_file(f)
        self._on_change = on_change

    @property
    def dirs(self) -> list[Path]:
        with self._lock:
            return [self.models_dir, *self._extra_dirs]

    @property
    def added_dirs(self) -> list[Path]:
        """The folders the user added (not the models dir)."""
        with self._lock:
            return list(self._extra_dirs)

    @property
    def added_files(self) -> list[Path]:
        """The single files the user added."""
        with self._lock:
            return list(self._extra_files)

    def add_dir(self, directory: Path | str) -> None:
        """Add a folder to look in (idempotent)."""
        d = Path(directory).expanduser().absolute()
        with self._lock:
            if d == self.models_dir.absolute() or d in self._extra_dirs:
                return
            self._extra_dirs.append(d)
        self._changed()

    def remove_dir(self, directory: Path | str) -> None:
        """Stop looking in a user-added folder (idempotent; the models dir stays)."""
        d = Path(directory).expanduser().absolute()
        with self._lock:
            if d not in self._extra_dirs:
                return
            self._extra_dirs.remove(d)
        self._changed()

    def add_file(self, path: Path | str) -> None:
        """Add one GGUF file, wherever it is (idempotent)."""
        f = Path(path).expanduser().absolute()
        with self._lock:
            if f in self._extra_files:
                return
            self._extra_files.append(f)
        self._changed()

    def remove_file(self, path: Path | str) -> None:
        f = Path(path).expanduser().absolute()
        with self._lock:
            if f not in self._extra_files:
                return
            self._extra_files.remove(f)
        self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            try:
                self._on_change(self)
            except Exception:  # remembering is worth a log line, never a lost folder
                log.exception("could not remember the library's folders")

    def scan(self) -> list[ModelEntry]:
        """Every GGUF file in the library, the default model first, then by path."""
        seen: set[Path] = set()
        entries: list[ModelEntry] = []
        default = _default_model_path() if self._include_default else None
        if default is not None:
            seen.add(default.resolve())
            entries.append(self._entry(default, is_default=True))
        for path in sorted(self._iter_files()):
            real = path.resolve()
            if real in seen:
                continue
            seen.add(real)
            entries.append(self._entry(path))
        with self._lock:  # forget files that are gone
            self._cache = {p: v for p, v in self._cache.items() if p in seen}
        return entries

    def get(self, path: Path | str) -> ModelEntry:
        """The entry for one file (read now if not cached)."""
        p = Path(path)
        default = _default_model_path() if self._include_default else None
        return self._entry(p, is_default=default is not None and p.resolve() == default.resolve())

    def _iter_files(self) -> Iterator[Path]:
        yield from (f for f in self.added_files if f.is_file())
        for d in self.dirs:
            if not d.is_dir():
                continue
            try:
                for path in d.rglob("*.gguf"):
                    rel = path.relative_to(d).parts
                    # Hidden folders hold partial downloads and other app state.
                    if any(part.startswith(".") for part in rel[:-1]):
                        continue
                    if path.is_file():
                        yield path
            except OSError as e:
                log.warning("cannot list %s: %s", d, e)

    def _entry(self, path: Path, *, is_default: bool = False) -> ModelEntry:
        real = path.resolve()
        try:
            st = real.stat()
            stamp = (st.st_size, st.st_mtime_ns)
        except OSError:
            stamp = (-1, -1)
        with self._lock:
            cached = self._cache.get(real)
        if cached is not None and cached[:2] == stamp:
            return cached[2]
        entry = read_entry(path, is_default=is_default)
        with self._lock:
            self._cache[real] = (*stamp, entry)
        return entry
