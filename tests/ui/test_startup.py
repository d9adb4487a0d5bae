"""The window appears at once with a loading state while the default model loads (issue #14
item 5): it is drawn before the load finishes, the composer waits, and then the model joins
the chat exactly like one loaded from the Models view."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication

from app.ui.app import create_window
from tests.ui.conftest import TEST_SAMPLING, TINY_OPTIONS
from tests.ui.helpers import type_and_send, wait_idle
from tests.ui.screens import screenshot


def _window(data_dir, model_path, **kwargs):
    return create_window(
        data_dir, model_path=model_path, model_id="tiny", model_options=dict(TINY_OPTIONS),
        default_sampling=TEST_SAMPLING, load_in_background=True, **kwargs,
    )  # fmt: skip


def test_the_window_is_up_before_the_model_is(qtbot, data_dir, tiny_model_path):
    window = _window(data_dir, tiny_model_path, work_areas=True)
    try:
        # Nothing has run on the GUI loop yet, so the load cannot have been seen to finish.
        loading = window.model_loading
        assert loading is not None and loading.is_loading
        assert window.models.ids() == []
        assert "Loading tiny" in window.status_model.text()
        assert window.banner.kind() == "info" and "Loading tiny" in window.banner.text()
        assert not window.chat_page.composer.isEnabled()
        assert window.chat_page.composer.input.placeholderText() == "The model is loading…"
        window.resize(1200, 780)
        window.show()
        screenshot(window, "startup-loading")
        qtbot.waitUntil(lambda: not loading.is_loading, timeout=60_000)
        assert window.models.ids() == ["tiny"] and window.controller.default_model_id == "tiny"
        assert window.chat_page.composer.isEnabled() and not window.banner.isVisible()
        assert window.status_model.text() == "● tiny"
        assert window.chat_page.model_picker.currentText() == "tiny"
        picker = window.model_manager.adapters_page.model_picker  # the Models view knows it
        assert [picker.itemText(i) for i in range(picker.count())] == ["tiny"]
        type_and_send(qtbot, window, "hello after a background load")
        wait_idle(qtbot, window)
        cid = window.chat_page.current_id
        assert [m.role for m in window.controller.branch(cid)] == ["user", "assistant"]
    finally:
        window.close()


def test_a_model_that_fails_to_load_is_reported_and_the_window_stays(qtbot, data_dir, tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF but not really")
    window = _window(data_dir, broken, work_areas=False)
    try:
        loading = window.model_loading
        assert loading is not None
        window.show()
        with qtbot.waitSignal(loading.finished, timeout=60_000) as done:
            pass
        assert done.args[0] == "tiny" and done.args[1].startswith("Could not load the model")
        assert window.banner.kind() == "error" and "Could not load the model" in window.banner.text()
        assert window.status_model.text() == "No model loaded"
        assert window.chat_page.composer.isEnabled() and window.models.ids() == []
        QApplication.processEvents()
    finally:
        window.close()
