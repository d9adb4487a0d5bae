"""LoRA adapter checks against a base model's architecture and weight shapes (docs/design.md §3)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from app.models.adapters import (
    AdapterError,
    AdapterMismatch,
    check_adapter_matches,
    inspect_adapter,
)

Maker = Callable[..., Path]


def test_inspect_reports_layout_and_file_hash(make_adapter: Maker) -> None:
    path = make_adapter(rank=4, alpha=16.0)
    info = inspect_adapter(path)

    assert info.architecture == "llama"
    assert info.alpha == 16.0
    assert info.rank == 4
    assert [t.base_tensor for t in info.targets] == [
        "blk.0.attn_q.weight", "blk.0.attn_v.weight", "blk.1.attn_q.weight", "blk.1.attn_v.weight",
    ]
    assert info.targets[1].lora_a_shape == (32, 4)
    assert info.targets[1].lora_b_shape == (4, 16)
    assert info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_matching_adapter_is_accepted(make_base: Maker, make_adapter: Maker) -> None:
    info = check_adapter_matches(make_adapter(), make_base())
    assert info.rank == 4


def test_adapter_for_another_architecture_is_refused(make_base: Maker, make_adapter: Maker) -> None:
    with pytest.raises(AdapterMismatch, match=r"architecture 'qwen2'.*is 'llama'"):
        check_adapter_matches(make_adapter(arch="qwen2"), make_base())


def test_adapter_with_other_shapes_is_refused(make_base: Maker, make_adapter: Maker) -> None:
    adapter = make_adapter(n_in=64, n_out={"attn_q": 64, "attn_v": 32})
    with pytest.raises(AdapterMismatch) as err:
        check_adapter_matches(adapter, make_base(n_embd=32))
    msg = str(err.value)
    assert "blk.0.attn_q.weight is [32, 32] in the model" in msg
    assert "lora_a is [64, 4] and lora_b is [4, 64]" in msg


def test_adapter_for_a_missing_weight_is_refused(make_base: Maker, make_adapter: Maker) -> None:
    adapter = make_adapter(targets=("attn_q", "attn_k"), n_out={"attn_q": 32, "attn_k": 16})
    with pytest.raises(AdapterMismatch, match="attn_k.weight, which the model .* does not have"):
        check_adapter_matches(adapter, make_base())


def test_adapter_with_more_layers_than_the_model_is_refused(
    make_base: Maker, make_adapter: Maker
) -> None:
    with pytest.raises(AdapterMismatch, match=r"blk\.2\.attn_q\.weight"):
        check_adapter_matches(make_adapter(n_layer=3), make_base(n_layer=2))


def test_a_model_is_not_an_adapter(make_base: Maker) -> None:
    with pytest.raises(AdapterMismatch, match="not a LoRA adapter"):
        check_adapter_matches(make_base("other.gguf"), make_base())


def test_wrong_adapter_type_is_refused(make_base: Maker, make_adapter: Maker) -> None:
    with pytest.raises(AdapterMismatch, match="not a LoRA adapter"):
        inspect_adapter(make_adapter(adapter_type="control_vector"))


def test_unpaired_lora_tensor_is_an_error(make_adapter: Maker) -> None:
    with pytest.raises(AdapterError, match="no matching .lora_b"):
        inspect_adapter(make_adapter(drop_b_of="blk.1.attn_v.weight"))


def test_truncated_or_missing_files_are_clear_errors(
    tmp_path: Path, make_base: Maker, make_adapter: Maker
) -> None:
    adapter = make_adapter()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(adapter.read_bytes()[:-8])
    with pytest.raises(AdapterError, match="not a readable GGUF file: truncated"):
        inspect_adapter(cut)
    with pytest.raises(AdapterError, match="does not exist"):
        check_adapter_matches(tmp_path / "nope.gguf", make_base())
    with pytest.raises(AdapterError, match="model 'nope.gguf' does not exist"):
        check_adapter_matches(adapter, tmp_path / "nope.gguf")


def test_shared_test_loras_against_the_default_model(
    smollm2_path: Path, tiny_lora_path: Path, foreign_lora_path: Path
) -> None:
    # The "foreign" LoRA has SmolLM2's shapes; the tiny model's LoRA does not.
    assert check_adapter_matches(foreign_lora_path, smollm2_path).rank == 8
    with pytest.raises(AdapterMismatch, match="does not fit the model"):
        check_adapter_matches(tiny_lora_path, smollm2_path)
