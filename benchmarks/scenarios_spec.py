"""B12: speculative decoding (prompt lookup) on against off against the raw loop, greedy.

(a) "rewrite" prompts whose reply repeats much of the input (fix the typos in a paragraph and
in a note, reformat a list, rename a variable in code); (b) ordinary chat prompts; (c) four sequences at once, two of
each. Every round runs the same requests with speculation on and then off on one loaded
model (a per-request option), back to back, so machine drift hits both alike; the raw loop
decodes the same prompts for as many tokens. Decode tok/s counts the tokens after each
request's first one, over the time from its first token to its last (for (c): from the moment
every stream has its first token, as in B1). Replies must be identical on and off.

    hearth bench --only B12
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from app.engine import Model
from app.engine.events import Done, Event, TokenId
from app.engine.llama.kv_checks import PROMPTS
from benchmarks.common import Result, config, engine_at, median, progress
from benchmarks.raw_loop import raw_decode_throughput

REWRITE = [
    "Fix the typos in this paragraph and write out the corrected paragraph:\n\n"
    "Teh old lighthouse stood on the edge of the cliff for more then a hundred years. Every nite "
    "its keeper climbed the stairs, lit the lamp and watched the ships pass safely in the dark. "
    "When the storm came, the keeper stayed awake untill morning and rang the bell evry hour. In "
    "the spring, the town painted the tower white again, and childern came to see the great lamp "
    "and the keeper's small garden of herbs and flowers.",
    "Reformat this list as a numbered list, one item per line:\n\n- apples, two kilos\n"
    "- fresh bread from the bakery\n- a dozen eggs\n- olive oil\n- three lemons\n- coffee beans\n"
    "- dark chocolate\n- a bag of rice\n- tomatoes for the sauce\n- a block of parmesan\n"
    "- fresh basil\n- sparkling water",
    "Rewrite this code with the variable `x` renamed to `total`:\n\n```python\n"
    "def add_prices(prices):\n    x = 0\n    for price in prices:\n        if price > 0:\n"
    "            x = x + price\n    return x\n```",
    "Fix the spelling in this note and write it out again:\n\nDear neighbour, the garden gate is "
    "brokn and the dog got out twice this weak. Could you plese keep your gate closed untill the "
    "repairman comes on Friday? He said he will also look at the fence behind the shed, which lost "
    "two boards in the wind. Thank you verry much, and see you at the street party on Saterday.",
]
CHAT = PROMPTS[:4]
MAX_TOKENS = 256
N_SEQ = 4


@dataclass
class Run:
    """One request's tokens and the moments they arrived."""

    ids: list[int] = field(default_factory=list)
    stamps: list[float] = field(default_factory=list)
    drafted: int = 0
    accepted: int = 0


def _chat(model: Model, text: str) -> list[int]:
    return model.apply_chat_template({"messages": [{"role": "user", "content": text}]})


def _run_together(model: Model, prompts: Sequence[list[int]], speculative: bool) -> list[Run]:
    runs = [Run() for _ in prompts]

    def recorder(run: Run) -> Callable[[Event], None]:
        def on_event(event: Event) -> None:
            if isinstance(event, TokenId):
                run.ids.append(event.id)
                run.stamps.append(time.perf_counter())
            elif isinstance(event, Done):
                run.drafted, run.accepted = event.stats.drafted_tokens, event.stats.accepted_tokens

        return on_event

    streams = [
        model.infer(p, response_tokens=MAX_TOKENS, speculative=speculative, on_event=recorder(r))
        for p, r in zip(prompts, runs, strict=True)
    ]
    for s in streams:
        s.result()
    return runs


def _decode_rate(runs: Sequence[Run]) -> float:
    """Tokens after the point every run has its first token, per second until the last one."""
    start = max(r.stamps[0] for r in runs)
    end = max(r.stamps[-1] for r in runs)
    counted = sum(sum(1 for t in r.stamps if t > start) for r in runs)
    return counted / (end - start) if end > start else 0.0


@dataclass
class Part:
    """One of (a), (b), (c): its prompts, run one at a time or together."""

    key: str
    title: str
    texts: list[str]
    together: bool
    on: list[float] = field(default_factory=list)
    off: list[float] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    identical: bool = True
    drafted: int = 0
    accepted: int = 0
    num_tokens: int = 0

    def batches(self, model: Model) -> list[list[list[int]]]:
        prompts = [_chat(model, t) for t in self.texts]
        return [prompts] if self.together else [[p] for p in prompts]

    def round(self, model: Model, path: str) -> None:
        """One round: every batch on, then off, then the raw loop; rates are summed over
        the batches' times (tokens / seconds over the whole part)."""
        spans = {"on": [0, 0.0], "off": [0, 0.0], "raw": [0, 0.0]}
        for prompts in self.batches(model):
            on = _run_together(model, prompts, True)
            off = _run_together(model, prompts, False)
            self.identical &= [r.ids for r in on] == [r.ids for r in off]
            self.drafted += sum(r.drafted for r in on)
            self.accepted += sum(r.accepted for r in on)
            for name, runs in (("on", on), ("off", off)):
                rate = _decode_rate(runs)
                n = sum(len(r.ids) - 1 for r in runs)
                spans[name][0] += n
                spans[name][1] += n / rate if rate else 0.0
            n_tokens = max(len(r.ids) for r in off)
            self.num_tokens += sum(len(r.ids) for r in off)
            rate = raw_decode_throughput(path, len(prompts), n_tokens, n_threads=2, prompt_tokens=prompts)
            n = len(prompts) * n_tokens
            spans["raw"][0] += n
            spans["raw"][1] += n / rate
        rates = {k: n / s for k, (n, s) in spans.items()}
        self.on.append(rates["on"])
        self.off.append(rates["off"])
        self.raw.append(rates["raw"])
        self.ratios.append(rates["on"] / rates["off"])


def b12_speculation(path: str, rounds: int = 5) -> Result:
    res = Result(
        "B12",
        "speculative decoding, greedy: (a) rewrites, (b) chat, (c) 4 sequences mixing both",
        "(a) ≥ 1.5 × speculation off; (b), (c) ≥ 0.97 × off; replies identical on and off",
        ["part", "on tok/s", "off tok/s", "raw tok/s", "on / off", "on / raw", "accepted / drafted", "identical"],
    )
    parts = [
        Part("a", "(a) rewrites, one at a time", REWRITE, together=False),
        Part("b", "(b) chat, one at a time", CHAT, together=False),
        Part("c", "(c) 4 at once: 2 rewrites + 2 chats", [REWRITE[0], CHAT[0], REWRITE[1], CHAT[1]], together=True),
    ]
    with engine_at() as engine:
        model = engine.load_model("m", config(path, n_ctx=2048, n_seq_max=N_SEQ, cache_enabled=False))
        _run_together(model, [_chat(model, CHAT[0])], True)  # warm-up (and the cost model's first ticks)
        for r in range(rounds):
            for part in parts:
                progress(f"B12 {part.key}: round {r + 1}/{rounds}")
                part.round(model, path)
    for part in parts:
        ratio = median(part.ratios)
        res.rows.append([
            part.title, median(part.on), median(part.off), median(part.raw), ratio,
            median(part.on) / median(part.raw), f"{part.accepted:,} / {part.drafted:,}", part.identical,
        ])  # fmt: skip
        res.figures[part.key] = {
            "on_tok_s": part.on, "off_tok_s": part.off, "raw_tok_s": part.raw, "paired_ratios": part.ratios,
            "ratio": ratio, "drafted": part.drafted, "accepted": part.accepted, "identical": part.identical,
            "tokens_per_round": part.num_tokens // rounds,
        }  # fmt: skip
    a, b, c = (median(p.ratios) for p in parts)
    res.met = a >= 1.5 and b >= 0.97 and c >= 0.97 and all(p.identical for p in parts)
    res.note = "decode tok/s after each reply's first token; the median of per-round on/off ratios"
    return res
