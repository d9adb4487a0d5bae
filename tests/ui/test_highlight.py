"""Code blocks in replies are coloured by Pygments (issue #14 item 5); a fence still being
streamed stays plain; Copy copies the code, never the markup."""

from __future__ import annotations

import re

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QVBoxLayout, QWidget

from app.ui.chat.highlight import MAX_HIGHLIGHT_CHARS, highlight_html, lexer_name, plain_html
from app.ui.chat.message_widget import MessageWidget
from app.ui.theme import apply_theme
from tests.ui.screens import screenshot

REPLY = """Here is one way:

```python
def reverse(text: str) -> str:
    # slices step backwards
    return text[::-1]
```

and in Rust:

```rust
fn main() { println!("{}", "abc".chars().rev().collect::<String>()); }
```
"""


def _shown(qtbot, widget) -> QWidget:
    """Show ``widget`` inside a plain host (no layout-driven size pushed to the platform)."""
    host = QWidget()
    layout = QVBoxLayout(host)
    layout.setSizeConstraint(QVBoxLayout.SizeConstraint.SetNoConstraint)
    layout.addWidget(widget)
    qtbot.addWidget(host)
    host.resize(720, 520)
    host.show()
    qtbot.waitExposed(host)
    return host


def _colours(fragment: str) -> set[str]:
    return set(re.findall(r"color: (#[0-9A-Fa-f]{3,6})", fragment))


def test_highlight_html_colours_known_languages_and_escapes_the_rest():
    light = highlight_html("def f(x):\n    return x < 1", "python", dark=False)
    dark = highlight_html("def f(x):\n    return x < 1", "Python", dark=True)
    assert "<span" in light and "&lt;" in light
    assert _colours(light) and _colours(dark) and _colours(light) != _colours(dark)
    assert lexer_name("py") == "Python" and lexer_name("klingon") is None
    unknown = highlight_html("<b>not bold</b>", "klingon", dark=False)
    assert unknown == plain_html("<b>not bold</b>") and "&lt;b&gt;" in unknown
    huge = "x = 1\n" * (MAX_HIGHLIGHT_CHARS // 6 + 1)
    assert highlight_html(huge, "python", dark=False) == plain_html(huge)


def test_reply_code_blocks_are_highlighted_and_copy_plain_code(qtbot):
    apply_theme(QApplication.instance(), "light")
    widget = MessageWidget("assistant", REPLY, message_id="m1")
    host = _shown(qtbot, widget)
    blocks = widget.body.code_blocks()
    assert [b.code() for b in blocks] == [
        'def reverse(text: str) -> str:\n    # slices step backwards\n    return text[::-1]',
        'fn main() { println!("{}", "abc".chars().rev().collect::<String>()); }',
    ]
    assert all(b.is_highlighted() for b in blocks)
    screenshot(host, "chat-code-highlight-light")
    blocks[1].copy_button.click()
    assert QGuiApplication.clipboard().text() == blocks[1].code()
    apply_theme(QApplication.instance(), "dark")
    dark = _shown(qtbot, MessageWidget("assistant", REPLY))
    screenshot(dark, "chat-code-highlight-dark")
    apply_theme(QApplication.instance(), "light")


def test_a_fence_still_streaming_stays_plain_until_it_closes(qtbot):
    live = MessageWidget("assistant", "", streaming=True)
    host = _shown(qtbot, live)  # noqa: F841 — keeps the widget alive
    live.set_content("Look:\n\n```python\ndef f():\n    return 1")
    (block,) = live.body.code_blocks()
    assert not block.is_highlighted() and block.code() == "def f():\n    return 1"
    live.set_content("Look:\n\n```python\ndef f():\n    return 1\n```\n")
    (block,) = live.body.code_blocks()
    assert block.is_highlighted()
