"""Is llama.cpp safe on this CPU? A short decode in a child process before the first load.

Some of llama.cpp's CPU kernels die with a signal instead of returning an error — its AMX
tile code on 4th-generation and newer Xeons raises SIGILL (llama.cpp issues #28756, #28328;
the fix, PR #26954, is not merged) — and a native crash in Hearth's own process would end it
with no word to the user. So before the first model load of a process, a child process loads
a small model and decodes with it, in each of ``CANDIDATES`` in turn, the safest last:

1. llama.cpp's defaults;
2. without its extra buffer types (``use_extra_bufts = False``): no repacked weights and no
   AMX buffers, the paths where a CPU-specific kernel runs;
3. the same on one thread.

The first that survives is used for every load of the process (``active()``); a fallback is
said in words (``ProbeResult.notice``), and if every candidate dies the load is refused with
what died and what to try (``NativeCrash``), never a dead process. The finding is kept in the
user's cache folder, keyed by the llama.cpp build (its libraries' names, sizes and times) and
the CPU (model name and flags), so the probe costs ~1 s once per build and machine.

The child is ``python -c CHILD_CODE MODEL EXTRA_BUFTS THREADS`` (the bundle:
``hearth --native-probe …``). ``HEARTH_PROBE_CRASH=SIGILL`` makes it raise that signal right
before its decode (``SIGILL:extra_bufts``: only in candidates with extra buffer types on) —
how the tests drive a native crash without a broken CPU.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from app.engine.errors import EngineError
from app.engine.llama.libs import lib_dir

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 120.0
"""A candidate's child is killed after this long (a load of the 135M model takes < 1 s)."""
FORMAT = 1
"""Bumped when what the probe checks changes, so older findings are not reused."""
CRASH_ENV = "HEARTH_PROBE_CRASH"
CHILD_CODE = "import sys; from app.engine.llama.native_probe import main; sys.exit(main(sys.argv[1:]))"


class NativeCrash(EngineError):
    """llama.cpp died with a signal in every configuration the probe tried."""

    code = "native_crash"


@dataclass(frozen=True, slots=True)
class NativeSettings:
    """How models are loaded in this process: what the probe found to be safe."""

    use_extra_bufts: bool = True
    max_threads: int | None = None

    def describe(self) -> str:
        if self.use_extra_bufts and self.max_threads is None:
            return "llama.cpp's defaults"
        parts = [] if self.use_extra_bufts else ["without extra buffer types (repacked weights, AMX)"]
        if self.max_threads is not None:
            parts.append(f"on {self.max_threads} thread{'s' if self.max_threads != 1 else ''}")
        return " ".join(parts)


CANDIDATES = (NativeSettings(), NativeSettings(use_extra_bufts=False), NativeSettings(False, 1))


@dataclass(frozen=True, slots=True)
class ProbeResult:
    settings: NativeSettings | None
    """The first candidate that survived; None: every one died."""
    failures: tuple[str, ...] = ()
    """One line per candidate that died, in order ("…: SIGILL (illegal instruction)")."""
    library: str = ""
    """The CPU backend the child loaded (``libggml-cpu-zen4.so``), when it said."""
    inconclusive: str = ""
    """The child failed without a crash (it could not load the probe's model, say): no finding,
    nothing kept; ``settings`` are the candidate it failed in, and the real load says its own
    error if there is one."""

    @property
    def notice(self) -> str | None:
        """Words for the user when anything died (None when the defaults ran)."""
        if not self.failures:
            return None
        where = f" in {self.library}" if self.library else ""
        died = "; ".join(self.failures)
        if self.settings is None:
            return (
                f"llama.cpp crashes on this CPU{where} ({died}), so Hearth loads no model here. "
                "Try a llama.cpp built for this machine (docs/llama-cpp-build.md: "
                "`make setup` with GGML_NATIVE=ON in packaging/llama-cpp/cmake-args) or report "
                "the CPU model and this message."
            )
        return (
            f"llama.cpp crashed on this CPU{where} ({died}); Hearth loads models "
            f"{self.settings.describe()}, which runs here. Prompts may be read more slowly."
        )


_active = NativeSettings()
_result: ProbeResult | None = None
_lock = threading.Lock()


def active() -> NativeSettings:
    """The settings every model load of this process uses (defaults until a probe ran)."""
    return _active


def last_result() -> ProbeResult | None:
    return _result


def signal_name(returncode: int) -> str:
    """``-4`` → "SIGILL (illegal instruction)"; other codes → "exit status N"."""
    if returncode >= 0:
        return f"exit status {returncode}"
    try:
        sig = signal.Signals(-returncode)
    except ValueError:
        return f"signal {-returncode}"
    return f"{sig.name} ({signal.strsignal(sig) or sig.name})".replace("Illegal instruction", "illegal instruction")


def cpu_identity() -> str:
    """The CPU's model name and flags (/proc/cpuinfo's first processor), or the platform."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        import platform

        return platform.processor() or platform.machine()
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return f"{fields.get('model name', '?')} | {fields.get('flags', fields.get('Features', ''))}"


def cpu_flags() -> set[str]:
    return set(cpu_identity().partition(" | ")[2].split())


def build_identity() -> str:
    """llama-cpp-python's version and its native libraries (names, sizes, modification times)."""
    import llama_cpp

    parts = [str(getattr(llama_cpp, "__version__", "?"))]
    try:
        for f in sorted(lib_dir().iterdir()):
            st = f.stat()
            parts.append(f"{f.name}:{st.st_size}:{st.st_mtime_ns}")
    except OSError:
        pass
    return "\n".join(parts)


def probe_key() -> str:
    text = f"{FORMAT}\n{build_identity()}\n{cpu_identity()}\n{os.environ.get(CRASH_ENV, '')}"
    return hashlib.sha256(text.encode()).hexdigest()


def findings_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hearth" / "native-probe.json"


def child_command(model: str, settings: NativeSettings) -> list[str]:
    threads = str(settings.max_threads or 0)
    extra = "1" if settings.use_extra_bufts else "0"
    if getattr(sys, "frozen", False):
        return [sys.executable, "--native-probe", model, extra, threads]
    return [sys.executable, "-c", CHILD_CODE, model, extra, threads]


def _run_child(model: str, settings: NativeSettings) -> tuple[int, str, str]:
    """(return code, the CPU backend the child loaded, its error line if it gave one)."""
    try:
        proc = subprocess.run(
            child_command(model, settings), capture_output=True, text=True,
            timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return -int(signal.SIGKILL), "", ""
    library = error = ""
    for line in proc.stdout.splitlines():
        if line.startswith("backend "):
            library = line.removeprefix("backend ").strip()
        elif line.startswith("error "):
            error = line.removeprefix("error ").strip()
    if proc.returncode > 0 and not error:
        error = (proc.stderr.strip().splitlines() or [signal_name(proc.returncode)])[-1][:500]
    return proc.returncode, library, error


def probe(model: str) -> ProbeResult:
    """Run the candidates in children until one survives (no cache, no side effects)."""
    failures: list[str] = []
    library = ""
    for settings in CANDIDATES:
        code, lib, error = _run_child(model, settings)
        library = lib or library
        if code == 0:
            return ProbeResult(settings, tuple(failures), library)
        if code > 0:  # an ordinary error, not a crash: no finding about this CPU
            return ProbeResult(settings, tuple(failures), library, inconclusive=error)
        failures.append(f"{settings.describe()}: {signal_name(code)}")
    return ProbeResult(None, tuple(failures), library)


def _load_findings(key: str) -> ProbeResult | None:
    try:
        data = json.loads(findings_path().read_text())
        if data.get("key") != key:
            return None
        raw = data["settings"]
        settings = None if raw is None else NativeSettings(**raw)
        return ProbeResult(settings, tuple(data.get("failures", ())), str(data.get("library", "")))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _save_findings(key: str, result: ProbeResult) -> None:
    path = findings_path()
    data = {
        "key": key,
        "settings": None if result.settings is None else asdict(result.settings),
        "failures": list(result.failures),
        "library": result.library,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError:
        log.warning("could not keep the native probe's finding in %s", path, exc_info=True)


def ensure(model: str) -> ProbeResult:
    """Probe once per process (and once per build + CPU, through the findings file); set
    ``active()``. Raises ``NativeCrash`` when every candidate died."""
    global _active, _result
    with _lock:
        if _result is None:
            key = probe_key()
            result = _load_findings(key)
            if result is None:
                result = probe(model)
                if result.inconclusive:
                    log.warning("llama.cpp's crash probe was inconclusive: %s", result.inconclusive)
                else:
                    _save_findings(key, result)
            if result.notice:
                log.warning("%s", result.notice)
            _result = result
            _active = result.settings or _active
        if _result.settings is None:
            raise NativeCrash(_result.notice or "llama.cpp crashes on this CPU")
        return _result


def reset_for_tests() -> None:
    global _active, _result
    with _lock:
        _active, _result = NativeSettings(), None


def loaded_cpu_backend() -> str:
    """The ``libggml-cpu*.so`` this process mapped (run-time dispatch picks one), or ""."""
    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            name = line.rsplit(" ", 1)[-1]
            if "libggml-cpu" in name:
                return Path(name).name
    except OSError:
        pass
    return ""


CPU_FLAGS_SHOWN = (
    "sse4_2", "avx", "f16c", "fma", "avx2", "bmi2", "avx_vnni", "avx512f", "avx512bw",
    "avx512vl", "avx512vbmi", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
    "amx_int8", "amx_bf16",
)


def cpu_report() -> str:
    """What llama.cpp was built for and what this CPU has, for ``hearth --self-test``: the CPU
    backend variants installed, the one loaded and its features, this CPU's model and flags."""
    import llama_cpp

    try:
        variants = sorted(
            f.name.removeprefix("libggml-cpu-").removesuffix(".so")
            for f in lib_dir().glob("libggml-cpu*.so")
        )
    except OSError:
        variants = []
    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    built = " ".join(  # "CPU : SSE3 = 1 | AVX = 1 | … | REPACK = 1 |": the features set
        part.split("=")[0].rpartition(":")[2].strip()
        for part in info.split("|") if part.strip().endswith("= 1")
    )
    flags = cpu_flags()
    has = " ".join(f for f in CPU_FLAGS_SHOWN if f in flags)
    model = cpu_identity().partition(" | ")[0]
    return (
        f"llama.cpp CPU backends built: {', '.join(variants) or '?'}; loaded: "
        f"{loaded_cpu_backend() or '?'} ({built or '?'}); this CPU: {model} ({has or 'none of ' + ' '.join(CPU_FLAGS_SHOWN)})"
    )


_quiet_log: object = None


def _child(model: str, use_extra_bufts: bool, threads: int) -> int:
    """Load ``model`` and decode a 32-token prompt (several-row kernels) and one token."""
    import llama_cpp

    from app.engine.llama.llama_handles import Batch, ctx_params

    global _quiet_log
    _quiet_log = llama_cpp.llama_log_callback(lambda *_: None)  # kept: llama.cpp calls it later
    llama_cpp.llama_log_set(_quiet_log, None)
    llama_cpp.llama_backend_init()
    mparams = llama_cpp.llama_model_default_params()
    mparams.use_extra_bufts = use_extra_bufts
    handle = llama_cpp.llama_model_load_from_file(model.encode(), mparams)
    if not handle:
        print(f"error cannot load {model}", flush=True)
        return 2
    print(f"backend {loaded_cpu_backend()}", flush=True)
    n = threads or min(os.cpu_count() or 1, 8)
    ctx = llama_cpp.llama_init_from_model(handle, ctx_params(
        n_ctx=256, n_seq_max=1, n_batch=64, n_ubatch=64, n_threads=n, flash_attn=True,
        type_k=llama_cpp.GGML_TYPE_Q8_0, type_v=llama_cpp.GGML_TYPE_F16,
    ))
    if not ctx:
        print("error cannot create a context", flush=True)
        return 2
    crash = os.environ.get(CRASH_ENV, "")
    if crash:
        name, _, only = crash.partition(":")
        if only != "extra_bufts" or use_extra_bufts:
            signal.raise_signal(getattr(signal, name))
    batch = Batch(64)
    vocab = llama_cpp.llama_model_get_vocab(handle)
    n_vocab = int(llama_cpp.llama_vocab_n_tokens(vocab))
    prompt = [(i * 7919) % n_vocab for i in range(32)]
    batch.put(0, prompt, 0, 0, logits=True)
    for n_tokens in (len(prompt), 1):
        if n_tokens == 1:
            batch.put(0, [prompt[-1]], len(prompt), 0, logits=True)
        batch.struct.n_tokens = n_tokens
        if llama_cpp.llama_decode(ctx, batch.struct) != 0:
            print("error decode failed", flush=True)
            return 2
    print("ok", flush=True)
    return 0


def main(argv: list[str]) -> int:
    model, extra, threads = argv[0], argv[1] == "1", int(argv[2])
    return _child(model, extra, threads)
