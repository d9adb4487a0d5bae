"""An 800 × 600 window (issue #14 item 5): nothing clipped, nothing squeezed to a sliver,
and every combo box draws its arrow (the Cache area's own style used to leave a boxed,
arrowless drop-down behind)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication, QComboBox, QWidget

from app.ui.chat.narrow_layout import MIN_CHAT_WIDTH
from app.ui.theme import colors
from tests.ui.screens import screenshot


def _inside(widget: QWidget, container: QWidget) -> bool:
    """``widget`` is shown whole inside ``container`` (not clipped at its edges)."""
    top_left = widget.mapTo(container, QPoint(0, 0))
    return container.rect().contains(QRect(top_left, widget.size()))


def _draws_arrow(box: QComboBox) -> bool:
    """Some pixel of the drop-down area has the theme's arrow colour."""
    image = box.grab().toImage()
    want = QColor(colors().muted)
    for x in range(max(0, image.width() - 24), image.width()):
        for y in range(image.height()):
            c = image.pixelColor(x, y)
            if abs(c.red() - want.red()) + abs(c.green() - want.green()) + abs(c.blue() - want.blue()) < 40:
                return True
    return False


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_window_fits_800_pixels(make_window, qtbot, scheme):
    window = make_window(work_areas=True, size=(800, 600))
    window.apply_scheme(scheme)
    page = window.chat_page
    # Chat with the settings panel open: the sidebar steps aside, nothing is clipped.
    page.new_conversation()
    page.settings_button.setChecked(True)
    qtbot.waitUntil(lambda: not page.sidebar.isVisible())
    qtbot.waitUntil(lambda: _inside(page.settings_panel, page))  # laid out on the next turn
    chat_panel = page.splitter.widget(1)
    assert chat_panel.width() >= MIN_CHAT_WIDTH - 10
    screenshot(window, f"layout-800-chat-settings-{scheme}")
    page.settings_button.setChecked(False)
    qtbot.waitUntil(lambda: page.sidebar.isVisible())
    window.resize(1280, 800)
    page.settings_button.setChecked(True)
    assert page.sidebar.isVisible()  # room for all three
    page.settings_button.setChecked(False)
    window.resize(800, 600)

    # Cache › Space & savings: each tier row, "Set limit" included, fits the card.
    dash = window.cache_dashboard
    window.nav_buttons["cache"].click()
    dash.select_tab(1)
    scroll_view = dash.tiers_panel.parentWidget().parentWidget()  # the scroll area's viewport

    def tier_rows_fit() -> None:
        assert dash.tiers_panel.rows
        for row in dash.tiers_panel.rows.values():
            assert _inside(row.apply, scroll_view), row.tier
            assert _draws_arrow(row.unit), row.tier

    # Each check waits for the layout that the click starts (however long a loaded machine
    # takes) and fails with its own message when it is never met.
    qtbot.waitUntil(tier_rows_fit, timeout=5_000)
    screenshot(window, f"layout-800-cache-space-{scheme}")
    dash.select_tab(0)

    def combo_boxes_draw_arrows() -> None:
        boxes = [box for box in dash.rows_panel.findChildren(QComboBox) if box.isVisible()]
        assert boxes
        for box in boxes:
            assert _draws_arrow(box), box.objectName()

    qtbot.waitUntil(combo_boxes_draw_arrows, timeout=5_000)
    screenshot(window, f"layout-800-cache-rows-{scheme}")

    # Models › Library: the table keeps most of the width, the card stays whole (it scrolls
    # in its own area when the window is too short for it, never squeezing its settings:
    # at this size they were squeezed to nothing until the card scrolled).
    window.nav_buttons["models"].click()
    lib = window.model_manager.library_page
    card = lib.details_card

    def library_fits() -> None:
        assert lib.isVisible()
        assert 240 <= card.width() <= 300, card.width()
        assert lib.table.width() > card.width()
        assert _inside(lib.details_scroll, window.model_manager)
        for spin in (lib.n_ctx, lib.n_seq_max, lib.n_batch):
            assert spin.height() >= spin.fontMetrics().height() + 8, (spin.objectName(), spin.height())

    qtbot.waitUntil(library_fits, timeout=5_000)
    screenshot(window, f"layout-800-models-{scheme}")


def test_combo_boxes_have_one_style_with_arrows(make_window):
    """The app sheet styles every combo box with a drawn arrow; no area's own sheet gives
    combo boxes a border without also styling their drop-down (that leaves Qt's boxed,
    native-looking drop-down behind, as the Cache area did)."""
    window = make_window(work_areas=True)
    sheet = QApplication.instance().styleSheet()
    assert "QComboBox::down-arrow" in sheet and "QComboBox::drop-down" in sheet
    paths = [part.split(")")[0] for part in sheet.split("image: url(")[1:]]
    assert paths and all(Path(p).is_file() for p in paths)
    for widget in [window, *window.findChildren(QWidget)]:
        own = widget.styleSheet()
        if re.search(r"(^|[\s,}])QComboBox\s*[,{]", own):
            assert "QComboBox::drop-down" in own, widget.objectName()
