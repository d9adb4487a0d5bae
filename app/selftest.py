"""``hearth --self-test``: a headless end-to-end check of an installation or a bundle.

No network and no Qt. On a temporary data dir it

1. ``load``: loads the default model (CPU, one thread, small context) with the bundled
   default cache policy (``resources/defaults/settings.json``, so the resources are checked
   too);
2. ``turn``: runs one short greedy chat turn ("capital of France") and checks the reply
   mentions Paris;
3. ``save``: runs a prompt of at least the policy's ``min_tokens`` cold, saves it with
   ``prefill_only`` on a session (a finish save), ends the session, flushes the cache writer;
4. ``restore``: the same prompt again must be an ``exact`` cache hit giving the same greedy
   tokens as the cold run;
5. ``reopen``: closes the engine, opens a new one on the same dir and checks the prompt is
   restored from disk, again token-identical.

It prints one line, ``hearth self-test: PASS (...)`` or ``hearth self-test: FAIL at <step>:
<reason>``, and returns 0 only when every step passed.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TextIO

QUESTION = "What is the capital of France? Answer in one sentence."
EXPECTED = "Paris"
CACHE_TEXT = (
    "A hearth is the stone floor of a fireplace. For centuries it was the centre of the home: "
    "people cooked on it, warmed themselves by it and gathered around it in the evening to "
    "talk. "
)
TURN_TOKENS = 24
THREADS = 1
"""One llama.cpp thread: the 135M model needs no more, and on a busy machine (2 cores shared
with other work) 2 spinning threads made a 40-token prefill take 11.6 s instead of 0.4 s."""
RESTORE_TOKENS = 8

SAVE_SESSION = "hearth-self-test-save"


class StepFailed(Exception):
    def __init__(self, step: str, reason: str) -> None:
        super().__init__(f"{step}: {reason}")
        self.step = step
        self.reason = reason


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0


@contextmanager
def _step(name: str) -> Iterator[None]:
    try:
        yield
    except StepFailed:
        raise
    except Exception as exc:  # any error inside a step fails that step, named
        raise StepFailed(name, f"{type(exc).__name__}: {exc}") from exc


def _check(step: str, ok: bool, reason: str) -> None:
    if not ok:
        raise StepFailed(step, reason)


def _run(model: Any, tokens: list[int], n: int) -> tuple[list[int], str, Any]:
    """Greedy ``infer``: (token ids, text, Stats)."""
    from app.engine.events import Done, Error, Token, TokenId

    ids: list[int] = []
    text: list[str] = []
    stats = None
    for event in model.infer(tokens, response_tokens=n, temperature=0.0):
        if isinstance(event, TokenId):
            ids.append(event.id)
        elif isinstance(event, Token):
            text.append(event.text)
        elif isinstance(event, Error):
            raise RuntimeError(f"engine error {event.code}: {event.reason}")
        elif isinstance(event, Done):
            stats = event.stats
    if stats is None:
        raise RuntimeError("the stream ended without a Done event")
    return ids, "".join(text), stats


def run_self_test(
    model_path: str | os.PathLike[str] | None = None,
    *,
    out: TextIO | None = None,
    data_dir: str | os.PathLike[str] | None = None,
) -> int:
    """Run every step; print the one-line verdict to ``out`` (stdout); 0 on PASS, else 1."""
    out = out or sys.stdout
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: nothing here needs a network
    notes: list[str] = []
    started = time.perf_counter()
    try:
        if data_dir is not None:
            _steps(model_path, Path(data_dir), notes)
        else:
            with tempfile.TemporaryDirectory(prefix="hearth-selftest-") as tmp:
                _steps(model_path, Path(tmp), notes)
    except StepFailed as exc:
        print(f"hearth self-test: FAIL at {exc.step}: {exc.reason}", file=out, flush=True)
        return 1
    notes.append(f"total {_ms(started) / 1000:.1f} s")
    print(f"hearth self-test: PASS ({'; '.join(notes)})", file=out, flush=True)
    return 0


def _steps(model_path: str | os.PathLike[str] | None, data: Path, notes: list[str]) -> None:
    from app.engine import Engine, ModelConfig

    with _step("resources"):
        from app.resources import load_default_settings

        policy = load_default_settings()["cache_policy"]
    with _step("model"):
        if model_path is None:
            from app.models.default_model import default_model_path

            model_path = default_model_path()
        path = Path(model_path)
        _check("model", path.is_file(), f"{path} is not a file")

    def config() -> ModelConfig:
        return ModelConfig(
            path=str(path), n_ctx=512, n_seq_max=1, n_batch=256, n_threads=THREADS,
            policy=policy, tier="disk",
        )

    engines: list[Any] = []

    def open_engine() -> Any:
        engine = Engine(data / "hearth")
        engines.append(engine)
        return engine

    try:
        with _step("load"):
            t = time.perf_counter()
            engine = open_engine()
            model = engine.load_model("selftest", config())
            notes.append(f"model {path.name} loaded in {_ms(t):.0f} ms")
            from app.engine.llama.native_probe import cpu_report

            notes.append(cpu_report())
            if engine.native_notice:
                notes.append(engine.native_notice)

        with _step("turn"):
            prompt = model.apply_chat_template({"messages": [{"role": "user", "content": QUESTION}]})
            t = time.perf_counter()
            ids, reply, _stats = _run(model, prompt, TURN_TOKENS)
            elapsed = _ms(t)
            reply = reply.strip()
            _check("turn", EXPECTED.lower() in reply.lower(),
                   f"the reply does not mention {EXPECTED}: {reply[:120]!r}")
            notes.append(f"turn {len(ids)} tokens in {elapsed:.0f} ms: {_short(reply)!r}")

        cold_ids: list[int] = []
        prompt = []
        with _step("save"):
            min_tokens = int(policy["min_tokens"])
            text = CACHE_TEXT
            prompt = model.tokenize(text)
            while len(prompt) < max(min_tokens, 48):
                text += CACHE_TEXT
                prompt = model.tokenize(text)
            cold_ids, _, stats = _run(model, prompt, RESTORE_TOKENS)
            _check("save", stats.cache_hit_kind == "cold",
                   f"the first run of the prompt was a {stats.cache_hit_kind!r} hit, expected cold")
            # On a session, ended after the save: its seq is cleared, so the next step reads
            # the cache (a session-less request leaves its cells for the next one, which
            # would start from them instead).
            pre = model.prefill_only(prompt, session_id=SAVE_SESSION)
            model.end_session(SAVE_SESSION)
            _check("save", pre.finish_key is not None,
                   f"prefill_only of {len(prompt)} tokens saved nothing (min_tokens {min_tokens})")
            t = time.perf_counter()
            engine.cache.flush()
            flush_ms = _ms(t)

        with _step("restore"):
            ids, _, stats = _run(model, prompt, RESTORE_TOKENS)
            _check("restore", stats.cache_hit_kind == "exact",
                   f"cache_hit_kind {stats.cache_hit_kind!r}, expected 'exact'")
            _check("restore", stats.cache_delta.read == len(prompt),
                   f"restored {stats.cache_delta.read} tokens, expected {len(prompt)}")
            _check("restore", ids == cold_ids, f"warm tokens {ids} differ from cold {cold_ids}")
            notes.append(
                f"save+restore {len(prompt)} tokens: flush {flush_ms:.0f} ms, "
                f"warm ttft {stats.ttft_ms:.0f} ms"
            )

        with _step("reopen"):
            engine.close()
            engine = open_engine()
            model = engine.load_model("selftest", config())
            ids, _, stats = _run(model, prompt, RESTORE_TOKENS)
            _check("reopen", stats.cache_hit_kind == "exact",
                   f"after a restart: cache_hit_kind {stats.cache_hit_kind!r}, expected 'exact'")
            _check("reopen", ids == cold_ids, f"tokens after a restart {ids} differ from cold {cold_ids}")
            notes.append(f"reopened from disk, ttft {stats.ttft_ms:.0f} ms")
    finally:
        for engine in engines:
            _close_quietly(engine.close)


def _short(text: str, limit: int = 48) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _close_quietly(close: Callable[[], None]) -> None:
    # The verdict is already decided; a failing close must not mask it.
    with suppress(Exception):
        close()


def main() -> int:
    return run_self_test()
