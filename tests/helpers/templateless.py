"""Tiny GGUFs that carry no chat template, with the Gemma and Llama-3 vocabularies' turn tokens.

Gemma 3 270M's GGUF has no ``tokenizer.chat_template``; Hearth must pick the model's own chat
format from its architecture and vocabulary (``app.chat_formats``). These models let a test see
whether it did: their vocabulary is SmolLM2's (as the other tiny models') with the control
tokens renamed after the family's, so no ChatML marker is left in it —

* ``gemma``  (architecture ``gemma3``): ``<pad> <eos> <bos> <unk> <start_of_turn> <end_of_turn>``
* ``llama3`` (architecture ``llama``): ``<|begin_of_text|> <|start_header_id|> <|end_header_id|>
  <|eot_id|> <|end_of_text|>``
* ``plain``  (architecture ``llama``): ``<s> </s> <unk>`` — the turn tokens of no chat format:
  a model Hearth must refuse to chat with until the user gives it a format

— and their weights make a **bigram** model that answers its family's generation prompt with
"Hello!" and then its end-of-turn token: every block's output projection is zero, so the last
hidden state is the current token's embedding, and the output head maps a few chosen tokens to
the next one of a chain::

    gemma:   "\\n"   (the end of "<start_of_turn>model\\n")                   -> Hello -> ! -> <end_of_turn>
    llama3:  "\\n\\n" (the end of "<|start_header_id|>assistant<|end_header_id|>\\n\\n") -> Hello -> ! -> <|eot_id|>
    plain:   "\\n" -> Hello -> ! -> </s>

Every other token goes on with random tokens that never enter the chain (their output rows
are zero where the chain's embeddings live), so a prompt in a foreign format (ChatML's ends in
one "\\n") makes the Llama-3 model write until its token limit — as the real models do.

Run as a script to (re)generate the files::

    python -m tests.helpers.templateless [DIR]     # default DIR: tests/.assets
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from tests.helpers.tiny_families import N_EMBD, N_FF, _Weights, _write_gemma3
from tests.helpers.tiny_model import (
    ASSETS_DIR,
    add_weight,
    atomic_write,
    finish,
    read_tokenizer,
    smollm2_gguf_path,
    write_tokenizer,
)

TEMPLATELESS_VERSION = 1
SEED = 50

CONTROL = 3  # gguf token type

SPECIALS = {
    "gemma": ("<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"),
    "llama3": ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|end_of_text|>"),
    "plain": ("<s>", "</s>", "<unk>"),
}
BOS_EOS = {"gemma": (2, 1), "llama3": (0, 4), "plain": (0, 1)}
END_OF_TURN = {"gemma": "<end_of_turn>", "llama3": "<|eot_id|>", "plain": "</s>"}
CHAIN_START = {"gemma": "Ċ", "llama3": "ĊĊ", "plain": "Ċ"}  # "\n" / "\n\n" in SmolLM2's byte-level BPE
REPLY = ("Hello", "!")
"""What the model answers its own format's generation prompt with ("Hello!")."""
FAMILIES = tuple(SPECIALS)

Array = np.ndarray[Any, Any]


def _tokenizer(family: str) -> dict[str, Any]:
    tok = read_tokenizer(smollm2_gguf_path())
    tok.pop("tokenizer.chat_template", None)
    tokens = list(tok["tokens"])
    types = list(tok["token_type"])
    for i, text in enumerate(SPECIALS[family]):
        tokens[i], types[i] = text, CONTROL
    # SmolLM2's other control tokens (<repo_name>, <file_sep>…) stay: no chat format uses them.
    tok["tokens"], tok["token_type"] = tokens, types
    tok["tokenizer.ggml.bos_token_id"], tok["tokenizer.ggml.eos_token_id"] = BOS_EOS[family]
    tok["tokenizer.ggml.add_bos_token"] = False
    tok["family"] = family
    if family == "llama3":
        tok["tokenizer.ggml.pre"] = "llama-bpe"
    return tok


def _chain(family: str, tokens: list[str]) -> list[int]:
    ids = {t: i for i, t in enumerate(tokens)}
    return [ids[CHAIN_START[family]], *(ids[t] for t in REPLY), ids[END_OF_TURN[family]]]


class _Bigram(_Weights):
    """Zero block projections; an embedding and output head that follow ``chain``."""

    def __init__(self, writer: gguf.GGUFWriter, chain: list[int]) -> None:
        super().__init__(writer, SEED)
        self.chain = chain

    def matrix(self, name: str, n_out: int, n_in: int, gain: float = 1.0) -> None:
        add_weight(self.w, name, np.zeros((n_out, n_in), dtype=np.float32))

    def embedding(self, n_vocab: int) -> None:
        k = len(self.chain)  # the chain lives in dims 0..k-1, everything else in k..N_EMBD-1
        embd = self.normal(1.0, n_vocab, N_EMBD)
        head = self.normal(0.1, n_vocab, N_EMBD)
        embd[:, :k] = 0.0
        head[:, :k] = 0.0
        for i, token in enumerate(self.chain):
            embd[token] = 0.0
            embd[token, i] = 1.0
            head[token] = 0.0
            if i:
                head[token, i - 1] = 1.0
        add_weight(self.w, "token_embd.weight", embd)
        add_weight(self.w, "output.weight", head)


def _write_llama(w: gguf.GGUFWriter, t: _Weights, n_vocab: int, tok: dict[str, Any]) -> None:
    n_layer, n_head, n_head_kv = 2, 2, 1
    head_dim = N_EMBD // n_head
    w.add_name(f"hearth-tiny-templateless-{tok['family']}")
    w.add_type("model")
    w.add_context_length(2048)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    write_tokenizer(w, tok, None)
    t.embedding(n_vocab)
    t.ones("output_norm.weight", N_EMBD, value=4.0)
    for i in range(n_layer):
        p = f"blk.{i}."
        t.ones(p + "attn_norm.weight", N_EMBD)
        t.matrix(p + "attn_q.weight", N_EMBD, N_EMBD)
        t.matrix(p + "attn_k.weight", n_head_kv * head_dim, N_EMBD)
        t.matrix(p + "attn_v.weight", n_head_kv * head_dim, N_EMBD)
        t.matrix(p + "attn_output.weight", N_EMBD, N_EMBD)
        t.ones(p + "ffn_norm.weight", N_EMBD)
        t.matrix(p + "ffn_gate.weight", N_FF, N_EMBD)
        t.matrix(p + "ffn_up.weight", N_FF, N_EMBD)
        t.matrix(p + "ffn_down.weight", N_EMBD, N_FF)


def write_templateless(path: Path, family: str) -> Path:
    """Write the ``family`` model (``gemma``, ``llama3`` or ``plain``) to ``path``."""
    tok = _tokenizer(family)
    n_vocab = len(tok["tokens"])
    chain = _chain(family, tok["tokens"])

    def write(tmp: Path) -> None:
        arch = "gemma3" if family == "gemma" else "llama"
        w = gguf.GGUFWriter(tmp, arch)
        weights = _Bigram(w, chain)
        if family == "gemma":
            _write_gemma3(w, weights, n_vocab, tok)  # its header's name says "gemma3"
        else:
            _write_llama(w, weights, n_vocab, tok)
        finish(w)

    return atomic_write(Path(path), write)


def ensure_templateless(family: str, directory: Path | str | None = None) -> Path:
    """``tiny-<family>-no-template-t<version>.gguf``, generated once into ``directory``."""
    if family not in SPECIALS:
        raise ValueError(f"unknown family {family!r}; one of {', '.join(FAMILIES)}")
    target = Path(directory) if directory is not None else ASSETS_DIR
    path = target / f"tiny-{family}-no-template-t{TEMPLATELESS_VERSION}.gguf"
    if not path.is_file():
        write_templateless(path, family)
    return path


def main(argv: list[str]) -> int:
    directory = Path(argv[1]) if len(argv) > 1 else ASSETS_DIR
    for family in FAMILIES:
        path = ensure_templateless(family, directory)
        sys.stdout.write(f"{path}  {path.stat().st_size} bytes\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
