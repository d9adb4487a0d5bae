"""Shared pieces of the benchmark scenarios: the model, engines in temp dirs, tables."""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.engine import Engine, ModelConfig

N_THREADS = 2


def default_model() -> str:
    from app.models.default_model import default_model_path

    return str(default_model_path())


@contextlib.contextmanager
def engine_at(data_dir: Path | None = None) -> Iterator[Engine]:
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hearth-bench-")))
        engine = Engine(data_dir)
        stack.callback(engine.close)
        yield engine


def config(path: str, **kw: Any) -> ModelConfig:
    kw.setdefault("n_ctx", 4096)
    kw.setdefault("n_seq_max", 8)
    kw.setdefault("n_batch", 512)
    kw.setdefault("n_threads", N_THREADS)
    return ModelConfig(path=path, **kw)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def quantile(values: Sequence[float], p: float) -> float:
    """The value at ``p`` (0..1) of the sorted values, no interpolation; NaN for none."""
    xs = sorted(values)
    return xs[int(p * (len(xs) - 1))] if xs else float("nan")


@dataclass
class Result:
    """One scenario: rows for the table, the figures for JSON, and the verdict on its goal."""

    id: str
    title: str
    goal: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    met: bool | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "title": self.title, "goal": self.goal, "met": self.met,
            "columns": self.columns, "rows": self.rows, "figures": self.figures, "note": self.note,
        }

    def table(self) -> str:
        cells = [self.columns] + [[_fmt(c) for c in row] for row in self.rows]
        widths = [max(len(str(r[i])) for r in cells) for i in range(len(self.columns))]
        lines = [f"{self.id} — {self.title}", f"goal: {self.goal}"]
        lines.append("| " + " | ".join(str(c).ljust(w) for c, w in zip(cells[0], widths, strict=True)) + " |")
        lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        for row in cells[1:]:
            lines.append("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
        verdict = {True: "met", False: "NOT met", None: "n/a"}[self.met]
        lines.append(f"verdict: {verdict}" + (f" — {self.note}" if self.note else ""))
        return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def progress(message: str) -> None:
    print(f"  … {message}", file=sys.stderr, flush=True)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def token_text(model: Any) -> Callable[[int], str]:
    """A token's text by ``model.detokenize``, remembered per token (prompts are rendered
    token by token, many times over)."""
    cache: dict[int, str] = {}

    def piece(token: int) -> str:
        if token not in cache:
            cache[token] = model.detokenize([token])
        return cache[token]

    return piece


def hearth_cells(path: str) -> tuple[str, str]:
    """The KV cell types Hearth's "auto" gives this model here (the calibrated pair, else the
    default), for the backend-alone loops a scenario compares Hearth with: they compare loops
    and caches, not cell types (the KV scenario compares those)."""
    from app.engine.llama.kv_calibration import resolve

    choice = resolve(path, background=False)
    return choice.type_k, choice.type_v

