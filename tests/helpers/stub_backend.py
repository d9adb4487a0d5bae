"""A deterministic stand-in backend for the scheduler's state machine (never for numbers).

Tokens are Unicode code points; token 0 is end-of-generation. Each seq's "KV" is the list
of tokens pushed into it, so pack/unpack, seq_rm and positions behave like the real thing,
and protocol mistakes (a decode without logits, a position gap, drafts the KV does not hold)
raise AssertionError. Drafts are verified with the real acceptance rule
(``speculation.verify``) against what the "model" says next.
With ``memory=MemoryCaps("recurrent", cut_states=False, trim_tail=False)`` it behaves like a
recurrent model's memory: a partial ``seq_rm`` or a partial ``seq_cp`` is a protocol mistake.

What the "model" says next: with ``script = {trigger: reply}``, once the seq's text contains
``trigger`` the reply follows character by character, then end-of-generation. Otherwise a
letter derived from the last tokens, forever.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.engine.backend import (
    BackendInfo,
    DecodeOp,
    MemoryCaps,
    Op,
    Prefilled,
    PrefillOp,
    Sampled,
    SamplingParams,
    StepResult,
)
from app.engine.grammar.check import check_grammar
from app.engine.speculation.lookup import verify

EOG = 0


@dataclass
class StubSampler:
    params: SamplingParams
    freed: bool = False
    accepted: list[int] = field(default_factory=list)


@dataclass
class StubBackend:
    n_seq_max: int = 4
    script: dict[str, str] = field(default_factory=dict)
    step_delay: float = 0.0
    chat_template: str | None = None
    kv: dict[int, list[int]] = field(default_factory=dict)
    has_logits: dict[int, bool] = field(default_factory=dict)
    steps: list[list[Op]] = field(default_factory=list)
    background_steps: list[list[Op]] = field(default_factory=list)
    """The ops of each tick decoded as a background one (``decode(background=True)``)."""
    prefilled: dict[int, int] = field(default_factory=dict)
    samplers_alive: int = 0
    samplers: list[StubSampler] = field(default_factory=list)
    closed: bool = False
    decoded_ticks: int = 0
    """Ticks whose "llama_decode" has completed."""
    memory: MemoryCaps = field(default_factory=MemoryCaps)
    draft_rows: dict[int, int] = field(default_factory=dict)
    """seq id → draft rows with logits its last decode pushed."""
    _sampled: list[Op] = field(default_factory=list)
    """Ops sampled and not decoded yet."""

    def __post_init__(self) -> None:
        self.info = BackendInfo(
            name="stub",
            n_ctx_train=4096,
            n_vocab=0x110000,
            quant_type="f16",
            quant_bits=16,
            fingerprint=b"\x11" * 32,
            ctx_params_hash=b"\x22" * 32,
            chat_template=self.chat_template,
            bos_token="",
            eos_token="",
            memory=self.memory,
        )

    # -- the tick
    def sample(self, ops: Sequence[Op]) -> list[StepResult]:
        """First half of a tick: check every op, then sample each decode row (and verify the
        drafts its previous decode pushed)."""
        for op in ops:
            seq = self.kv.setdefault(op.seq_id, [])
            drafted = op.drafted if isinstance(op, DecodeOp) else ()
            assert op.pos + len(drafted) == len(seq), f"seq {op.seq_id}: pos {op.pos} + {len(drafted)} drafts but KV holds {len(seq)}"
            if isinstance(op, DecodeOp):
                assert self.has_logits.get(op.seq_id), f"seq {op.seq_id} decoded without logits"
                assert tuple(seq[op.pos :]) == op.drafted, f"seq {op.seq_id}: the KV holds other drafts"
                assert self.draft_rows.get(op.seq_id, 0) >= len(op.drafted), f"seq {op.seq_id}: drafts without logits"
        pending = {op.seq_id for op in self._sampled}
        assert not pending & {op.seq_id for op in ops}, "a seq sampled twice without a decode between"
        self.steps.append(list(ops))
        out: list[StepResult] = []
        for op in ops:
            if isinstance(op, PrefillOp):
                out.append(Prefilled())
            else:
                seq = self.kv[op.seq_id]
                accepted, tok = verify(op.drafted, lambda i, s=seq, p=op.pos: self.next_token(s[: p + i]))
                out.append(Sampled(tok, tok == EOG, accepted))
        self._sampled.extend(ops)
        return out

    def decode(
        self, ops: Sequence[Op], sampled: Sequence[StepResult], *, background: bool = False,
        before: Callable[[], None] | None = None,
    ) -> None:
        """Second half: "llama_decode" drops rejected drafts, pushes the slices, the sampled
        tokens and the new drafts (``before`` first, as the real backend calls it)."""
        # A tick's decode pushes ops sampled since the last one: all of them, or (the tick
        # reading the prompts that end in it first, ``Scheduler._read_first``) its prefill
        # slices alone, then the rest with the first decode rows sampled after them.
        assert ops and all(op in self._sampled for op in ops), "decode of ops that were not sampled"
        if before is not None:
            before()
        self._sampled = [op for op in self._sampled if op not in ops]
        in_batch = {op.seq_id for op in ops}
        for seq_id in self.has_logits:
            if seq_id not in in_batch:
                self.has_logits[seq_id] = False  # llama.cpp keeps only this batch's logits
        if background:
            self.background_steps.append(list(ops))
        if self.step_delay:
            time.sleep(self.step_delay)
        for op, res in zip(ops, sampled, strict=True):
            seq = self.kv[op.seq_id]
            if isinstance(op, PrefillOp):
                seq.extend(op.tokens)
                self.prefilled[op.seq_id] = self.prefilled.get(op.seq_id, 0) + len(op.tokens)
                self.has_logits[op.seq_id] = op.want_logits
                self.draft_rows[op.seq_id] = 0
            else:
                assert isinstance(res, Sampled)
                assert len(res.drafts) <= op.draft_max, f"seq {op.seq_id}: more drafts than rows reserved"
                assert res.accepted == op.drafted[: len(res.accepted)], f"seq {op.seq_id}: accepted what was not drafted"
                del seq[op.pos + len(res.accepted) :]
                seq.append(res.token)
                seq.extend(res.drafts)
                self.draft_rows[op.seq_id] = len(res.drafts)
                self.has_logits[op.seq_id] = True
        self.decoded_ticks += 1

    def step(self, ops: Sequence[Op]) -> list[StepResult]:
        out = self.sample(ops)
        self.decode(ops, out)
        return out

    def greedy(self, seq_id: int) -> int:
        """What the "model" says next for the seq (a draft model's choice)."""
        assert self.has_logits.get(seq_id) and not self.draft_rows.get(seq_id), f"seq {seq_id} has no logits"
        return self.next_token(self.kv[seq_id])

    def next_token(self, seq: list[int]) -> int:
        text = "".join(chr(t) for t in seq if t)
        best = None
        for trigger, reply in self.script.items():
            idx = text.rfind(trigger)
            if idx >= 0 and (best is None or idx > best[0]):
                best = (idx, trigger, reply)
        if best is not None:
            idx, trigger, reply = best
            said = text[idx + len(trigger) :]
            if reply.startswith(said):
                return ord(reply[len(said)]) if len(said) < len(reply) else EOG
        return ord("a") + (sum(seq[-3:]) * 7 + len(seq)) % 26

    # -- samplers
    def check_grammar(self, grammar: str) -> None:
        check_grammar(grammar, None)  # the real parser and checks, without a vocabulary

    def new_sampler(self, params: SamplingParams) -> Any:
        if params.grammar is not None:
            self.check_grammar(params.grammar)
        self.samplers_alive += 1
        self.samplers.append(StubSampler(params))
        return self.samplers[-1]

    def free_sampler(self, sampler: Any) -> None:
        assert not sampler.freed
        sampler.freed = True
        self.samplers_alive -= 1

    def accept(self, sampler: Any, token: int) -> None:
        sampler.accepted.append(token)

    # -- KV
    def seq_rm(self, seq_id: int, start: int = 0) -> None:
        """Drop positions ``start`` and after. Like llama.cpp, the newest logits stay valid
        when only drafts after them go (the rows before ``start``)."""
        seq = self.kv.setdefault(seq_id, [])
        assert self.can_trim(seq_id, start), f"seq {seq_id}: a {self.memory.kind} state cut at {start}"
        drafts_from = len(seq) - self.draft_rows.get(seq_id, 0)
        del seq[start:]
        if start < drafts_from:
            self.has_logits[seq_id] = False
            self.draft_rows[seq_id] = 0
        else:
            self.draft_rows[seq_id] = len(seq) - drafts_from

    def can_trim(self, seq_id: int, n_keep: int) -> bool:
        held = len(self.kv.get(seq_id, []))
        return n_keep <= 0 or n_keep >= held or self.memory.trim_tail

    def seq_cp(self, src: int, dst: int, n_tokens: int) -> None:
        held = len(self.kv.get(src, []))
        assert held >= n_tokens, "copying positions the source does not hold"
        assert self.memory.cut_states or n_tokens == held, f"a {self.memory.kind} state copied cut"
        self.kv[dst] = list(self.kv[src][:n_tokens])
        self.has_logits[dst] = False
        self.draft_rows[dst] = 0

    def kv_pack(self, seq_id: int, into: Callable[[int], memoryview] | None = None) -> bytes:
        return ",".join(map(str, self.kv.get(seq_id, []))).encode()

    def kv_unpack(self, seq_id: int, payload: bytes | memoryview) -> bool:
        try:
            self.kv[seq_id] = [int(t) for t in bytes(payload).decode().split(",") if t]
        except ValueError:
            return False
        self.has_logits[seq_id] = False
        self.draft_rows[seq_id] = 0
        return True

    # -- text
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        return [ord(c) for c in text]

    def detokenize(self, tokens: Sequence[int]) -> str:
        return "".join(chr(t) for t in tokens if t)

    def token_piece(self, token: int) -> bytes:
        return chr(token).encode("utf-8", "surrogatepass") if token else b""

    def is_eog(self, token: int) -> bool:
        return token == EOG

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, tools: list[Any] | None = None) -> str:
        body = "".join(f"<{m['role']}>{m['content']}\n" for m in messages)
        return body + ("<assistant>" if add_generation_prompt else "")

    def embed(self, tokens: Sequence[int]) -> list[float]:
        return [float(len(tokens)), float(sum(tokens) % 97)]

    def load_adapter(self, path: str) -> Any:
        return object()

    def set_adapters(self, adapters: Sequence[tuple[Any, float]]) -> None:
        pass

    def free_adapter(self, adapter: Any) -> None:
        pass

    def verify(self, seq_id: int, prefix: Sequence[int], candidates: Sequence[int]) -> tuple[int, int | None]:
        seq = list(prefix)
        accepted = 0
        for cand in candidates:
            if self.next_token(seq) != cand:
                break
            seq.append(cand)
            accepted += 1
        nxt = self.next_token(seq)
        return accepted, None if nxt == EOG else nxt

    def close(self) -> None:
        self.closed = True


@dataclass
class FaultyBackend(StubBackend):
    """The stub, plus faults: ``arm("decode", exc)`` makes the next matching call raise ``exc``
    (once) before the stub does anything, so the scheduler's handling of each phase can be
    tested. ``when`` filters on the call's arguments."""

    armed: dict[str, list[tuple[Callable[..., bool], BaseException]]] = field(default_factory=dict)
    raised: list[str] = field(default_factory=list)

    def arm(self, method: str, exc: BaseException, when: Callable[..., bool] | None = None) -> None:
        self.armed.setdefault(method, []).append((when or (lambda *args: True), exc))

    def _fault(self, method: str, *args: Any) -> None:
        for i, (when, exc) in enumerate(self.armed.get(method, [])):
            if when(*args):
                del self.armed[method][i]
                self.raised.append(method)
                raise exc

    def sample(self, ops: Sequence[Op]) -> list[StepResult]:
        self._fault("sample", ops)
        return super().sample(ops)

    def decode(
        self, ops: Sequence[Op], sampled: Sequence[StepResult], *, background: bool = False,
        before: Callable[[], None] | None = None,
    ) -> None:
        try:
            self._fault("decode", ops)
        except BaseException:
            self._sampled = [op for op in self._sampled if op not in ops]  # like llama_decode: these are done
            raise
        super().decode(ops, sampled, background=background, before=before)

    def new_sampler(self, params: SamplingParams) -> Any:
        self._fault("new_sampler", params)
        return super().new_sampler(params)

    def free_sampler(self, sampler: Any) -> None:
        self._fault("free_sampler", sampler)
        super().free_sampler(sampler)

    def accept(self, sampler: Any, token: int) -> None:
        self._fault("accept", sampler, token)
        super().accept(sampler, token)

    def seq_rm(self, seq_id: int, start: int = 0) -> None:
        self._fault("seq_rm", seq_id, start)
        super().seq_rm(seq_id, start)

    def seq_cp(self, src: int, dst: int, n_tokens: int) -> None:
        self._fault("seq_cp", src, dst, n_tokens)
        super().seq_cp(src, dst, n_tokens)

    def kv_pack(self, seq_id: int, into: Callable[[int], memoryview] | None = None) -> bytes:
        self._fault("kv_pack", seq_id)
        return super().kv_pack(seq_id, into)

    def kv_unpack(self, seq_id: int, payload: bytes | memoryview) -> bool:
        self._fault("kv_unpack", seq_id)
        return super().kv_unpack(seq_id, payload)
