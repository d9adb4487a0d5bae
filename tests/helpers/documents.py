"""Real files for the document tests and B13: PDFs written with fpdf2 (a text layer, none,
encrypted), and a public-domain text."""

from __future__ import annotations

from pathlib import Path

from fpdf import FPDF

TALE = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
    "age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the "
    "season of Light, it was the season of Darkness, it was the spring of hope, it was the winter "
    "of despair, we had everything before us, we had nothing before us, we were all going direct "
    "to Heaven, we were all going direct the other way."
)
"""Charles Dickens, A Tale of Two Cities (1859), its first sentence: public domain."""


def text_pdf(path: Path, pages: list[str]) -> Path:
    """A PDF whose pages hold ``pages`` as text (a text layer), in a core font (Latin-1)."""
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 6, text)
    pdf.output(str(path))
    return path


def scanned_pdf(path: Path, num_pages: int = 2) -> Path:
    """A PDF of drawings only: no text layer (as a scan without OCR)."""
    pdf = FPDF()
    for i in range(num_pages):
        pdf.add_page()
        pdf.rect(20 + i, 20, 120, 160, style="F")
    pdf.output(str(path))
    return path


def encrypted_pdf(path: Path) -> Path:
    """A PDF that needs a password to open."""
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    pdf.add_page()
    pdf.multi_cell(0, 6, TALE)
    pdf.set_encryption(owner_password="owner", user_password="secret")
    pdf.output(str(path))
    return path
