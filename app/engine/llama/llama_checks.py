"""What ``LlamaBackend`` checks before llama.cpp sees a tick (a mixin: llama.cpp aborts the
process on a bad seq id, position or token, so each is refused here with an ``EngineError``
naming the seq), and the greedy ``verify`` of draft tokens (``Backend.verify``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from app.engine.backend import DecodeOp, Op, PrefillOp, Sampled, StepResult
from app.engine.errors import ContextOverflow, EngineError, InvalidRequest, NBatchTooSmall
from app.engine.llama.llama_handles import Batch
from app.engine.llama.llama_vocab import Vocab


class TickChecks:
    """A mixin of ``LlamaBackend``: the checks of its ops and pushes, and ``verify``."""

    n_ctx_per_seq: int
    n_batch: int
    vocab: Vocab
    _ctx: Any
    _batch: Batch
    _rows: dict[int, int]
    _drafted: dict[int, tuple[int, tuple[int, ...]]]

    if TYPE_CHECKING:  # SeqKv's and LlamaBackend's, for the type checker only

        def _check_seq(self, seq_id: int) -> None: ...
        def seq_rm(self, seq_id: int, start: int = 0) -> None: ...
        def _decode(self, ctx: Any, batch: Batch, n_tokens: int) -> None: ...
        def _argmax(self, row: int) -> int: ...
        def is_eog(self, token: int) -> bool: ...

    def _check_ops(self, ops: Sequence[Op]) -> None:
        """Validate a tick before any sampler state changes; a refused op's seq id goes on the error."""
        n_tokens = 0
        limit = self.n_ctx_per_seq
        for op in ops:
            try:
                self._check_seq(op.seq_id)
                if type(op) is DecodeOp:
                    if op.seq_id not in self._rows:
                        raise RuntimeError(f"seq {op.seq_id} has no logits from the previous tick")
                    if (op.pos, op.drafted) != self._drafted.get(op.seq_id, (op.pos, ())):
                        raise RuntimeError(f"seq {op.seq_id}: the op's drafts are not the ones its KV holds")
                    end = op.pos + 1 + op.draft_max
                    n_tokens += 1 + op.draft_max
                elif isinstance(op, PrefillOp):
                    self._check_tokens(op.tokens)
                    end = op.pos + len(op.tokens)
                    n_tokens += len(op.tokens)
                else:
                    raise TypeError(f"not a tick op: {op!r}")
                if end > limit:
                    raise ContextOverflow(f"seq {op.seq_id}: position {end - 1} is past n_ctx {limit}")
            except EngineError as exc:
                exc.seq_id = op.seq_id
                raise
        if n_tokens > self._batch.capacity:
            raise NBatchTooSmall(f"a tick of {n_tokens} tokens exceeds n_batch={self._batch.capacity}")

    def _check_pushes(self, ops: Sequence[Op], sampled: Sequence[StepResult]) -> None:
        """What ``decode`` pushes for each decode row is within what ``sample`` checked: its
        drafts fit the rows the op reserved and keep only accepted cells."""
        for op, res in zip(ops, sampled, strict=True):
            if type(op) is DecodeOp:
                if not isinstance(res, Sampled):
                    raise TypeError(f"seq {op.seq_id}: a decode row needs a Sampled result, got {res!r}")
                if len(res.drafts) > op.draft_max or res.accepted != op.drafted[: len(res.accepted)]:
                    raise ValueError(f"seq {op.seq_id}: drafts or accepted tokens outside the op")
                self._check_tokens(res.drafts)

    def _check_tokens(self, tokens: Sequence[int]) -> None:
        self.vocab.check(tokens)

    def verify(self, seq_id: int, prefix: Sequence[int], candidates: Sequence[int]) -> tuple[int, int | None]:
        """Greedy check of draft ``candidates`` after ``prefix``; leaves the seq empty.

        Returns (number of leading candidates equal to the model's argmax, the argmax token
        after them or None when it is end-of-generation).
        """
        if not prefix:
            raise InvalidRequest("verify needs a non-empty prefix")
        tokens = list(prefix) + list(candidates)
        self._check_tokens(tokens)
        if len(tokens) > self.n_ctx_per_seq:
            raise ContextOverflow(f"verify needs {len(tokens)} tokens, n_ctx is {self.n_ctx_per_seq}")
        first = len(prefix) - 1  # the row whose logits predict candidates[0]
        argmax: list[int] = []
        self.seq_rm(seq_id)
        try:
            for start in range(0, len(tokens), self.n_batch):
                chunk = tokens[start : start + self.n_batch]
                end = self._batch.put(0, chunk, start, seq_id)
                lo = max(first - start, 0)
                self._batch.logits[lo:end] = 1 if lo < end else 0
                self._decode(self._ctx, self._batch, end)
                argmax.extend(self._argmax(row) for row in range(lo, end))
        finally:
            self._rows, self._drafted = {}, {}
            self.seq_rm(seq_id)
        accepted = 0
        while accepted < len(candidates) and candidates[accepted] == argmax[accepted]:
            accepted += 1
        following = argmax[accepted]
        return accepted, None if self.is_eog(following) else following
