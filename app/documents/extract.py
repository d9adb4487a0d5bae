"""A file's text, or a clear refusal: plain text, Markdown and source code (any text file,
its encoding detected), PDF (its text layer, page by page), HTML and DOCX.

A document is untrusted input. Whatever it holds, extraction either returns the whole text
(``Extracted``) or raises ``DocumentError`` with a message for the person who attached it —
never half a document. It runs off the GUI thread (the caller's worker); ``progress`` is told
``(done, total)`` pages of a PDF, and ``cancelled`` is asked between pages.

Libraries: PDF through ``pypdf`` (pure Python, BSD, maintained by the py-pdf project; no
native code to crash the process on a hostile file, and its errors are Python exceptions);
the encoding of a text file that is not UTF-8 through ``charset-normalizer`` (requests'
detector); HTML through the standard library's parser; DOCX through ``zipfile`` and the
standard XML parser (its ``word/document.xml``), since no maintained converter without
heavy dependencies covers it.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree

from app.units import human_bytes

MAX_FILE_BYTES = 64 * 2**20
"""A file larger than this is refused before it is read. NOTE: 64 MiB of text is ~16 M
tokens, far past any context a local model loads; a PDF that large is mostly images."""

MAX_TEXT_CHARS = 16 * 2**20
"""Extracted text longer than this is refused (a small file can expand: a DOCX is zipped)."""

SNIFF = 64 * 1024
"""Bytes looked at to tell a binary file from text."""

WESTERN_SLACK = 0.2
"""How much more "chaos" (``charset-normalizer``'s measure) Windows-1252 may show and still be
preferred to its first guess. NOTE: French text in Latin-1 (``café crème brûlée``, 300
bytes) was guessed as cp1257 (chaos 0.0, "crčme"), cp1252 read it right at chaos 0.19 with the
same coherence; Cyrillic in cp1251 has no cp1252 candidate at all."""

Progress = Callable[[int, int], None]


class DocumentError(Exception):
    """Why a file cannot be attached, in words for its owner."""


@dataclass(frozen=True, slots=True)
class Extracted:
    name: str
    kind: str
    """text | pdf | html | docx"""
    text: str
    pages: int = 0
    """Pages of a PDF (0 for a file without pages)."""
    page_starts: tuple[int, ...] = ()
    """Where each page's text starts in ``text`` (a PDF's; for a page range)."""

    def page_range(self, first: int, last: int) -> Extracted:
        """Pages ``first``..``last`` (1-based, inclusive) of a PDF, named so."""
        if not self.page_starts:
            raise DocumentError(f"{self.name} has no pages to choose from.")
        first, last = max(1, first), min(self.pages, last)
        if first > last:
            raise DocumentError(f"{self.name} has pages 1 to {self.pages}.")
        ends = (*self.page_starts[1:], len(self.text) + 2)
        text = self.text[self.page_starts[first - 1] : ends[last - 1] - 2]
        starts = tuple(s - self.page_starts[first - 1] for s in self.page_starts[first - 1 : last])
        return Extracted(f"{self.name} (pages {first}-{last})", self.kind, text, last - first + 1, starts)


def extract_file(path: str | Path, progress: Progress | None = None,
                 cancelled: Callable[[], bool] | None = None) -> Extracted:  # fmt: skip
    path = Path(path)
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise DocumentError(f"{path.name} is not a file.")
        if size > MAX_FILE_BYTES:
            raise DocumentError(too_large(path.name, size))
        data = path.read_bytes()
    except OSError as exc:
        raise DocumentError(f"Could not read {path.name}: {exc.strerror or exc}.") from exc
    return extract_bytes(path.name, data, progress, cancelled)


def too_large(name: str, size: int) -> str:
    return (f"{name} is too large to attach ({human_bytes(size)}; the limit is {human_bytes(MAX_FILE_BYTES)}). "
            "Attach the part you need: save those pages or that section as a file of its own.")


def extract_bytes(name: str, data: bytes, progress: Progress | None = None,
                  cancelled: Callable[[], bool] | None = None) -> Extracted:  # fmt: skip
    """``data`` (the file named ``name``) as text."""
    if len(data) > MAX_FILE_BYTES:
        raise DocumentError(too_large(name, len(data)))
    suffix = Path(name).suffix.lower()
    try:
        if data.startswith(b"%PDF-") or (suffix == ".pdf" and b"%PDF-" in data[:1024]):
            result = _pdf(name, data, progress, cancelled)
        elif data.startswith(b"PK\x03\x04"):
            result = _docx(name, data) if suffix == ".docx" or _is_docx(data) else _binary(name)
        else:
            text = decode_text(name, data)
            if suffix in (".html", ".htm", ".xhtml") or _looks_like_html(text):
                result = Extracted(name, "html", _clean(html_text(text)))
            else:
                result = Extracted(name, "text", _clean(text))
    except DocumentError:
        raise
    except (RecursionError, MemoryError) as exc:
        raise DocumentError(f"{name} is too deeply nested or too large to read ({type(exc).__name__}).") from exc
    if not result.text.strip():
        raise DocumentError(f"{name} holds no text.")
    if len(result.text) > MAX_TEXT_CHARS:
        raise DocumentError(f"{name} holds {len(result.text):,} characters of text, more than any model's context "
                            "could read. Attach the part you need.")
    return result


# -- text ---------------------------------------------------------------------------------------

_BOMS = (
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)


def decode_text(name: str, data: bytes) -> str:
    """The text of a text file: by its byte-order mark, as UTF-8, or in the encoding
    ``charset-normalizer`` finds; a file that is none of these is refused as binary."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding)
            except UnicodeDecodeError as exc:
                raise DocumentError(f"{name} starts as {encoding.upper()} text but is not: {exc.reason} "
                                    f"at byte {exc.start:,}.") from exc
    head = data[:SNIFF]
    if b"\x00" in head:
        raise DocumentError(_binary_words(name))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = _detected(name, data)
    if _control_share(text[:SNIFF]) > 0.02:
        raise DocumentError(_binary_words(name))
    return text


def _detected(name: str, data: bytes) -> str:
    from charset_normalizer import from_bytes

    matches = list(from_bytes(data))
    if not matches:
        raise DocumentError(f"{name} is not UTF-8 and its encoding could not be told. Save it as UTF-8 "
                            "and attach it again.")
    best = matches[0]
    for m in matches:  # Windows-1252, the most common legacy encoding, when it reads as well
        if m.encoding == "cp1252" and m.coherence >= best.coherence and m.chaos <= best.chaos + WESTERN_SLACK:
            return str(m)
    return str(best)


def _control_share(text: str) -> float:
    if not text:
        return 0.0
    bad = sum(1 for ch in text if (ord(ch) < 32 and ch not in "\t\n\r\f\v") or 0x7F <= ord(ch) < 0xA0)
    return bad / len(text)


def _binary_words(name: str) -> str:
    return (f"{name} looks like a binary file, not text. Hearth reads text files (plain text, Markdown, "
            "source code), PDF with a text layer, HTML and DOCX.")


def _binary(name: str) -> Extracted:
    raise DocumentError(_binary_words(name))


_BLANKS = re.compile(r"[ \t]+\n")


def _clean(text: str) -> str:
    """Newlines as ``\\n``, no NUL, no trailing blanks on a line or at the end."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    return _BLANKS.sub("\n", text).rstrip()


# -- PDF ----------------------------------------------------------------------------------------


def _pdf(name: str, data: bytes, progress: Progress | None, cancelled: Callable[[], bool] | None) -> Extracted:
    import logging

    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # a damaged file's warnings are its own
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not _decrypted(reader):
            raise DocumentError(f"{name} is encrypted (it needs a password to open). Save a copy without "
                                "the password and attach that.")
        pages = reader.pages
        total = len(pages)
        texts: list[str] = []
        for i in range(total):
            if cancelled is not None and cancelled():
                raise DocumentError(f"Reading {name} was cancelled.")
            texts.append(_clean(pages[i].extract_text() or ""))
            if progress is not None:
                progress(i + 1, total)
    except DocumentError:
        raise
    except Exception as exc:  # a damaged or hostile file: pypdf's errors are many kinds
        raise DocumentError(f"{name} could not be read as a PDF ({type(exc).__name__}: {exc}).") from exc
    if not any(t.strip() for t in texts):
        raise DocumentError(f"{name} has no text layer: its {total:,} page{'s' if total != 1 else ''} are "
                            "images (a scan?). Run it through OCR first, or paste its text.")
    starts, pos = [], 0
    for t in texts:
        starts.append(pos)
        pos += len(t) + 2
    return Extracted(name, "pdf", "\n\n".join(texts), total, tuple(starts))


def _decrypted(reader: object) -> bool:
    """An encrypted PDF that opens without a password (an owner password only) is read."""
    try:
        return bool(reader.decrypt(""))  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 — a cipher pypdf cannot run is the same refusal
        return False


# -- HTML ---------------------------------------------------------------------------------------


def _looks_like_html(text: str) -> bool:
    head = text[:512].lstrip().lower()
    return head.startswith("<!doctype html") or head.startswith("<html")


class _HtmlText(HTMLParser):
    SKIP = frozenset({"script", "style", "head", "noscript", "template", "svg"})
    BLOCK = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "section",
                       "article", "blockquote", "table", "ul", "ol", "hr", "title"})  # fmt: skip

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self._skip += 1
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def html_text(html: str) -> str:
    parser = _HtmlText()
    parser.feed(html)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).split("\n"))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


# -- DOCX ---------------------------------------------------------------------------------------

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
MAX_DOCX_XML = 64 * 2**20
"""``word/document.xml`` larger than this (unzipped) is refused: a zip bomb."""


def _is_docx(data: bytes) -> bool:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return "word/document.xml" in z.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return False


def _docx(name: str, data: bytes) -> Extracted:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            info = z.getinfo("word/document.xml")
            if info.file_size > MAX_DOCX_XML:
                raise DocumentError(too_large(name, info.file_size))
            xml = z.read(info)
        if b"<!DOCTYPE" in xml or b"<!ENTITY" in xml:
            raise DocumentError(f"{name} is not a Word document Hearth can read (it declares entities).")
        root = ElementTree.fromstring(xml)
    except DocumentError:
        raise
    except (KeyError, zipfile.BadZipFile, ElementTree.ParseError, OSError, ValueError, NotImplementedError) as exc:
        raise DocumentError(f"{name} could not be read as a Word document ({exc}).") from exc
    paragraphs = []
    for p in root.iter(f"{_W}p"):
        bits = []
        for node in p.iter():
            if node.tag == f"{_W}t" and node.text:
                bits.append(node.text)
            elif node.tag == f"{_W}tab":
                bits.append("\t")
            elif node.tag in (f"{_W}br", f"{_W}cr"):
                bits.append("\n")
        paragraphs.append("".join(bits))
    return Extracted(name, "docx", _clean("\n".join(paragraphs)))
