"""The chat's LoRA indicator: hidden without adapters; names the adapter and its scale."""

from __future__ import annotations

from app.ui.chat.adapter_chip import AdapterChip, adapter_summary


def test_summary_names_adapters_and_scales():
    assert adapter_summary([]) is None
    one = adapter_summary([{"path": "/m/cooking-lora.gguf", "scale": 0.8, "handle": 1}])
    assert one is not None and one[0] == "LoRA · cooking-lora ×0.80"
    assert "cooking-lora: scale 0.80" in one[1]
    two = adapter_summary([{"path": "a.gguf", "scale": 1.0}, {"path": "b.gguf", "scale": 0.0}])
    assert two is not None and two[0] == "LoRA · a ×1.00 +1"
    assert "b: scale 0.00 (off)" in two[1]


def test_the_chip_is_hidden_without_adapters(qtbot):
    chip = AdapterChip()
    qtbot.addWidget(chip)
    chip.show_adapters([])
    assert chip.isHidden()
    chip.show_adapters([{"path": "x.gguf", "scale": 0.5}])
    assert not chip.isHidden() and chip.text() == "LoRA · x ×0.50"
    chip.show_adapters([])
    assert chip.isHidden()
