"""Long words wrap instead of running past the chat column.

A Qt label wraps at word boundaries only, so one word wider than the column (a long
identifier, a hash, a run of letters a small model writes) sets the label's minimum width:
the column grows past the window and every line of the chat is cut at the right edge. The
text a label shows gets invisible break points (U+200B, zero width space) inside such words;
the message's own text is untouched (Copy, the transcript, storage), and a selection copied
from the app has them taken out again (:func:`strip_breaks_on_copy`).
"""

from __future__ import annotations

import html
import re
import unicodedata
from functools import lru_cache

from PySide6.QtGui import QClipboard, QGuiApplication
from PySide6.QtWidgets import QApplication, QLabel

__all__ = ["ZWSP", "breakable", "breakable_html", "strip_breaks_on_copy"]

ZWSP = "\u200b"
LONG = 24
"""Words of this many characters or more get break points (shorter ones wrap whole)."""
CHUNK = 12
"""At most this many characters between two break points inside a long word."""
_LONG_WORD = re.compile(rf"\S{{{LONG},}}")
_NATURAL = set("_.:/,;)]}-=&|+")
"""A break may follow these inside a long word (identifiers, paths, lists)."""


def breakable(text: str) -> str:
    """``text`` with zero-width break points inside each word of ``LONG`` or more characters:
    after ``_ . : /`` and the like, between a lower- and an upper-case letter, and at least
    every ``CHUNK`` characters. Links (``://``, ``](``, ``www.``, ``<…>``) are left whole, so
    their targets still work. Plain and Markdown text alike (a break point is not Markdown
    syntax)."""
    if len(text) < LONG or not _LONG_WORD.search(text):
        return text
    return _LONG_WORD.sub(_break_word, text)


_TAG_OR_TEXT = re.compile(r"(<[^>]*>)|([^<]+)")


@lru_cache(maxsize=256)
def breakable_html(fragment: str) -> str:
    """:func:`breakable` for the text of an HTML fragment (a highlighted code block); tags
    and entities stay whole."""
    if len(fragment) < LONG or not _LONG_WORD.search(fragment):
        return fragment

    def text(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return match.group(1)
        raw = match.group(2)
        plain = html.unescape(raw)
        broken = breakable(plain)
        return raw if broken == plain else html.escape(broken, quote=False)

    return _TAG_OR_TEXT.sub(text, fragment)


def _break_word(match: re.Match[str]) -> str:
    word = match.group(0)
    if "://" in word or "](" in word or word.startswith(("www.", "<")) or ZWSP in word:
        return word
    out: list[str] = []
    run = 0  # characters since the last break point
    for i, ch in enumerate(word):
        nxt = word[i + 1] if i + 1 < len(word) else ""
        out.append(ch)
        run += 1
        if not nxt or not _may_break_before(nxt) or ch == "\\":
            continue
        if ch in _NATURAL or (ch.islower() and nxt.isupper()) or run >= CHUNK:
            out.append(ZWSP)
            run = 0
    return "".join(out)


def _may_break_before(ch: str) -> bool:
    """Not inside a character: combining marks, joiners and variation selectors stay with
    the character before them."""
    return not unicodedata.combining(ch) and unicodedata.category(ch) not in ("Mn", "Me", "Cf", "Sk")


_hooked = False


def strip_breaks_on_copy() -> None:
    """Once per process: text the app puts on the clipboard (or the selection buffer) loses
    the break points :func:`breakable` added, so a copied word is the word."""
    global _hooked
    if _hooked:
        return
    clipboard = QGuiApplication.clipboard()
    if clipboard is None:
        return
    _hooked = True
    clipboard.dataChanged.connect(lambda: _strip(QClipboard.Mode.Clipboard))
    clipboard.selectionChanged.connect(lambda: _strip(QClipboard.Mode.Selection))


def _strip(mode: QClipboard.Mode) -> None:
    # NOTE: only a copy from a label of this app (it has the focus while its selection is
    # copied); not the text another program put there. (Clipboard ownership cannot tell: the
    # offscreen and some other platforms never report owning it.)
    if not isinstance(QApplication.focusWidget(), QLabel):
        return
    clipboard = QGuiApplication.clipboard()
    text = clipboard.text(mode)
    if ZWSP in text:
        clipboard.setText(text.replace(ZWSP, ""), mode)
