"""A LoRA adapter in the Library list is attached from there (issue #14 item 5): select it,
pick a loaded model, Attach — it is checked, attached, and shown on the Adapters page."""

from __future__ import annotations

from PySide6.QtCore import Qt

from tests.ui.models.conftest import snap, wait_idle
from tests.ui.models.test_adapters import _load_tiny

LEFT = Qt.MouseButton.LeftButton


def test_attach_an_adapter_from_the_library_list(qtbot, make_manager, engine, tiny_model_path,
                                                 tiny_lora_path, foreign_lora_path):
    mm = make_manager(extra_dirs=(tiny_model_path.parent,))
    lib = mm.library_page
    # Before any model is loaded the adapter row says what to do first.
    assert lib.select_path(tiny_lora_path)
    assert lib.attach_box.isVisible() and not lib.load_box.isVisible()
    assert not lib.attach_button.isEnabled()
    assert "Load a model first" in lib.attach_hint.text()

    model_id = _load_tiny(qtbot, mm, tiny_model_path)
    mm.show_page("library")
    assert lib.select_path(tiny_lora_path)
    assert [lib.attach_model_picker.itemText(i)
            for i in range(lib.attach_model_picker.count())] == [model_id]
    snap(mm, "models-library-attach-adapter")
    qtbot.mouseClick(lib.attach_button, LEFT)
    wait_idle(qtbot, mm)
    assert mm.stack.currentWidget() is mm.adapters_page
    adapters = engine.get_model(model_id).list_adapters()
    assert [a["path"] for a in adapters] == [str(tiny_lora_path)]
    assert [r.handle for r in mm.adapters_page.adapter_rows()] == [adapters[0]["handle"]]

    # One made for another model is refused, and the reason is shown where it lands.
    mm.show_page("library")
    assert lib.select_path(foreign_lora_path)
    qtbot.mouseClick(lib.attach_button, LEFT)
    wait_idle(qtbot, mm)
    assert mm.adapters_page.error_card.label.text().startswith("Refused:")
    assert len(engine.get_model(model_id).list_adapters()) == 1
