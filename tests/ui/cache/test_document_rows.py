"""Issue 52: the Cache dashboard names a row by the documents its prompt opens with (a real
store, the tiny model, the app's document layout)."""

from __future__ import annotations

from typing import Any

from app.documents import Attached, system_with_documents
from app.ui.qt_models.cache_rows import COL_PREVIEW
from tests.helpers.documents import TALE
from tests.ui.cache.conftest import screenshot
from tests.ui.cache.test_live_store import SEEN, SYSTEM, chat, rows_shown


def test_a_documents_rows_show_its_file_name(tiny: Any, engine: Any, make_dashboard: Any, qtbot: Any) -> None:
    dash = make_dashboard(engine)
    system = system_with_documents(SYSTEM, [Attached("tale.pdf", TALE), Attached("notes.md", "# Bread\nRise twice.")])
    tiny.infer(chat(tiny, "Which season is it?", system), session_id="doc-chat", response_tokens=3).result(timeout=120)
    tiny.infer(chat(tiny, "How long should bread dough rise?"), session_id="plain", response_tokens=3).result(timeout=120)
    qtbot.waitUntil(lambda: rows_shown(dash) >= 2, timeout=SEEN)
    previews = sorted(str(dash.rows_panel.proxy.index(i, COL_PREVIEW).data()) for i in range(rows_shown(dash)))
    named = [p for p in previews if p.startswith("[tale.pdf, notes.md] ")]
    assert len(named) == 1 and "Which season is it?" in named[0], previews
    plain = [p for p in previews if "How long should bread dough rise?" in p]
    assert len(plain) == 1 and not plain[0].startswith("["), previews
    assert all(p.startswith("[tale.pdf") for p in previews if p not in plain), previews  # the prompt's prefix rows
    screenshot(dash, "cache-document-rows")
