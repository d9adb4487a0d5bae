"""Syntax highlighting of fenced code blocks with Pygments, as rich text for a ``QLabel``.

No Qt here: ``highlight_html`` returns an HTML fragment with inline colours (Qt's rich text
understands ``<span style="color:…">`` and ``white-space: pre-wrap``). Results are cached, so
re-rendering a conversation (switching chats, a theme change) costs nothing for blocks
already seen.
"""

from __future__ import annotations

import html
from functools import lru_cache

import pygments
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name
from pygments.lexers.special import TextLexer
from pygments.util import ClassNotFound

STYLE_LIGHT = "default"
STYLE_DARK = "github-dark"
# NOTE: measured on the 2-core dev machine under load: Pygments takes ~10 ms for 100 lines of
# Python and ~60 ms for 400; blocks past this size stay plain so one reply never stalls
# the GUI thread for long.
MAX_HIGHLIGHT_CHARS = 20_000
# A div, not <pre>: it keeps the label's own fixed-width font.
PRE_STYLE = "margin:0; white-space:pre-wrap;"


def highlight_html(code: str, language: str, *, dark: bool) -> str:
    """``code`` as an HTML fragment, coloured for ``language`` (plain if unknown)."""
    return _highlight(code, language.strip().lower(), dark)


def plain_html(code: str) -> str:
    """``code`` as the same kind of fragment, uncoloured (e.g. while it is still streaming)."""
    return f'<div style="{PRE_STYLE}">{html.escape(code)}</div>'


def lexer_name(language: str) -> str | None:
    """The Pygments lexer that would colour ``language``, or None (plain text)."""
    lexer = _lexer(language.strip().lower())
    return None if isinstance(lexer, TextLexer) else lexer.name


@lru_cache(maxsize=512)
def _highlight(code: str, language: str, dark: bool) -> str:
    lexer = _lexer(language)
    if isinstance(lexer, TextLexer) or len(code) > MAX_HIGHLIGHT_CHARS:
        return plain_html(code)
    formatter = HtmlFormatter(nowrap=True, noclasses=True, style=STYLE_DARK if dark else STYLE_LIGHT)
    body = pygments.highlight(code, lexer, formatter)
    if body.endswith("\n") and not code.endswith("\n"):
        body = body[:-1]  # Pygments ends every output with a newline
    return f'<div style="{PRE_STYLE}">{body}</div>'


@lru_cache(maxsize=64)
def _lexer(language: str) -> Lexer:
    if not language:
        return TextLexer()
    try:
        return get_lexer_by_name(language, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer()
