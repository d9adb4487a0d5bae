"""How often does the bundled model write a usable summary? (issue 27, item 2)

    .venv/bin/python -m tools.summary_rate          # SmolLM2, the fixed chats
    .venv/bin/python -m tools.summary_rate --show   # and print every summary

Plays each fixed chat of ``tools/summary_chats.py`` into a 512-token context under
"Summarise the oldest turns", the way the app's bridge does: the same planner
(``plan_window``), the same summary prompt ending in ``SUMMARY_OPENING``
(``PromptBuilder.summary_prompt``), the same summary length and sampling (the chat defaults'
repetition penalty, temperature 0). Every summary the planner asks for is one try;
``check_summary`` decides whether it is usable. A usable summary becomes the view's summary
(the next cut summarises it again with the turns that leave); an unusable one is dropped, as
the app does. Prints the tries and the rate. 14 min on 2 cores at load average 12–15.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from app.conversation.prompt import PromptBuilder
from app.conversation.window import (
    SUMMARY_OPENING,
    Budget,
    OverflowPolicy,
    Turn,
    WindowState,
    check_summary,
    clean_summary,
)
from app.engine import Engine, ModelConfig
from app.engine.events import Done, Error, Token
from app.engine.model import Model
from app.storage import SamplingSettings
from app.ui.chat.params import infer_params
from tools.summary_chats import CHATS

N_CTX = 512
REPLY_TOKENS = 64  # the bridge's DEFAULT_REPLY_TOKENS: what a summary's budget is cut from


@dataclass
class Try:
    chat: str
    seed: int
    cut: int
    turns: int
    previous: bool
    summary: str
    verdict: str  # "" when usable


@contextlib.contextmanager
def smollm2(threads: int) -> Iterator[Model]:
    from app.models.default_model import default_model_path

    with tempfile.TemporaryDirectory(prefix="hearth-summary-") as data:
        engine = Engine(Path(data))
        try:
            config = ModelConfig(
                path=str(default_model_path()), n_ctx=N_CTX, n_seq_max=1, n_batch=256,
                n_threads=threads, cache_enabled=False,
            )  # fmt: skip
            yield engine.load_model("smollm2", config)
        finally:
            engine.close()


def write(model: Model, prompt: list[int], params: dict[str, object]) -> str:
    text: list[str] = []
    for event in model.infer(prompt, **params):
        if isinstance(event, Token):
            text.append(event.text)
        elif isinstance(event, Error):
            raise RuntimeError(event.reason)
        elif isinstance(event, Done):
            break
    return "".join(text)


def play(model: Model, name: str, texts: list[str], seed: int) -> list[Try]:
    """One chat, turn by turn, summarising whenever the planner says so."""
    sampling = SamplingSettings(seed=seed)
    params = dict(infer_params(sampling))
    budget = Budget.for_reply(N_CTX, int(sampling.max_tokens))
    summary_budget = Budget.for_reply(N_CTX, REPLY_TOKENS)
    params["response_tokens"] = summary_budget.summary_tokens
    params["temperature"] = 0.0  # as the bridge asks for a summary
    turns = [Turn(f"{name}-{i}", "user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)]
    window, tries = WindowState(), []
    for end in range(1, len(turns) + 1, 2):  # after each user turn
        seen = turns[:end]
        plan = PromptBuilder(model, "", seen).plan(window, budget, OverflowPolicy.SUMMARISE)
        if plan.kind == "summarise":
            leaving = seen[plan.summarise_from : plan.start]
            builder = PromptBuilder(model, "", leaving)
            prompt = builder.summary_prompt(leaving, plan.summary, summary_budget.limit)
            text = SUMMARY_OPENING + write(model, prompt, params)
            why = check_summary(text, leaving, plan.summary)
            tries.append(Try(name, seed, len(tries) + 1, len(leaving), bool(plan.summary), text, why))
            window = WindowState(seen[plan.start].id, "" if why else clean_summary(text))
        elif plan.kind == "cut":
            window = WindowState(seen[plan.start].id, "")
        elif not plan.can_send:
            raise RuntimeError(f"{name}: the planner said {plan.kind}")
    return tries


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=1, help="seeds per chat (greedy: 1 is enough)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--show", action="store_true", help="print every summary")
    ap.add_argument("--json", type=Path, help="write the tries here")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    tries: list[Try] = []
    with smollm2(args.threads) as model:
        for seed in range(1, args.seeds + 1):
            for name, texts in CHATS.items():
                for t in play(model, name, texts, seed):
                    tries.append(t)
                    mark = "usable" if not t.verdict else f"NOT usable: it {t.verdict}"
                    print(f"{t.chat:7} seed {t.seed} cut {t.cut} ({t.turns} turns"
                          f"{' + summary' if t.previous else ''}): {mark}", flush=True)
                    if args.show:
                        print("    " + t.summary.strip().replace("\n", "\n    "))
    usable = sum(1 for t in tries if not t.verdict)
    print(f"\nusable summaries: {usable} / {len(tries)} tries "
          f"({100 * usable / max(1, len(tries)):.0f} %), {time.perf_counter() - t0:.0f} s")
    reasons: dict[str, int] = {}
    for t in tries:
        if t.verdict:
            reasons[t.verdict] = reasons.get(t.verdict, 0) + 1
    for why, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        print(f"  {n:3} {why}")
    if args.json:
        args.json.write_text(json.dumps([asdict(t) for t in tries], indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
