"""A model's vocabulary: text ↔ token ids, token pieces, end-of-generation, id checks.

``Vocab`` wraps llama.cpp's ``llama_vocab`` of one loaded model (``LlamaBackend.vocab``);
it owns no native memory (the model does) and is used only while the model is alive.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import llama_cpp

from app.engine.errors import InvalidRequest


class Vocab:
    def __init__(self, model: Any) -> None:
        self.ptr = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self.ptr))
        self._eog: dict[int, bool] = {}
        self._pieces: dict[int, bytes] = {}
        """token → its piece, remembered: a reply's tokens are mostly ones it has used before,
        and a dict lookup spares a ctypes buffer and call per streamed token."""

    def check(self, tokens: Sequence[int]) -> None:
        """Out-of-vocabulary ids crash some llama.cpp entry points; refuse them up front."""
        if tokens and (min(tokens) < 0 or max(tokens) >= self.n_vocab):
            bad = next(t for t in tokens if not 0 <= t < self.n_vocab)
            raise InvalidRequest(f"token id {bad} is outside the vocabulary (0..{self.n_vocab - 1})")

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        size = len(data) + 8
        while True:
            buf = (llama_cpp.llama_token * size)()
            n = llama_cpp.llama_tokenize(self.ptr, data, len(data), buf, size, add_special, parse_special)
            if n >= 0:
                return list(buf[:n])
            size = -n

    def detokenize(self, tokens: Sequence[int]) -> str:
        if not tokens:
            return ""
        self.check(tokens)
        arr = (llama_cpp.llama_token * len(tokens))(*tokens)
        size = len(tokens) * 8 + 16
        while True:
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_detokenize(self.ptr, arr, len(tokens), buf, size, False, True)
            if n >= 0:
                return buf.raw[:n].decode("utf-8", "replace")
            size = -n

    def token_piece(self, token: int) -> bytes:
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self._token_piece(token)
        return piece

    def _token_piece(self, token: int) -> bytes:
        if not 0 <= token < self.n_vocab:
            self.check([token])
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.ptr, token, buf, 64, 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.ptr, token, buf, -n, 0, True)
        return buf.raw[:n]

    def is_eog(self, token: int) -> bool:
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[token] = bool(llama_cpp.llama_vocab_is_eog(self.ptr, token))
        return eog
