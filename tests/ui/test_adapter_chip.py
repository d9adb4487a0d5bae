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


def test_the_chat_header_shows_an_attached_adapter(make_window, qtbot, tiny_lora_path):
    from tests.ui.helpers import type_and_send, wait_idle
    from tests.ui.screens import screenshot

    window = make_window(work_areas=True)
    chip = window.chat_page.adapter_chip
    type_and_send(qtbot, window, "before the adapter")
    wait_idle(qtbot, window)
    assert chip.isHidden()
    page = window.model_manager.adapters_page
    page.refresh_models(select="tiny")
    with qtbot.waitSignal(window.model_manager.adapters_changed, timeout=30_000):
        page.attach_adapter(tiny_lora_path)
    assert not chip.isHidden()
    assert chip.text() == f"LoRA · {tiny_lora_path.stem} ×1.00"
    qtbot.waitUntil(lambda: chip.width() >= chip.sizeHint().width())  # laid out, not squeezed
    screenshot(window, "chat-lora-indicator")
    handle = window.engine.get_model("tiny").list_adapters()[0]["handle"]
    with qtbot.waitSignal(window.model_manager.adapters_changed, timeout=30_000):
        page.detach_adapter(handle)
    assert chip.isHidden()
