"""Documents (issue 52): each kind of file gives its whole text or a clear refusal, and the
prompt layout puts the same documents at the same place."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest
from sqlalchemy import text as sql_text

from app.documents import DocumentError, extract_bytes, extract_file, system_with_documents
from app.documents.extract import MAX_FILE_BYTES
from app.documents.layout import Attached
from app.storage import Storage
from tests.helpers.documents import TALE, encrypted_pdf, scanned_pdf, text_pdf


def test_pdf_text_layer_page_by_page(tmp_path: Path) -> None:
    pages = [f"Page {i}. {TALE}" for i in range(1, 4)]
    seen: list[tuple[int, int]] = []
    doc = extract_file(text_pdf(tmp_path / "tale.pdf", pages), progress=lambda d, t: seen.append((d, t)))
    assert doc.kind == "pdf" and doc.pages == 3
    assert seen == [(1, 3), (2, 3), (3, 3)]
    flat = " ".join(doc.text.split())
    for i in range(1, 4):
        assert f"Page {i}. It was the best of times" in flat
    part = doc.page_range(2, 3)
    assert part.pages == 2 and "Page 1." not in part.text and "Page 3." in " ".join(part.text.split())
    assert part.name == "tale.pdf (pages 2-3)"


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: scanned_pdf(p / "scan.pdf"), "has no text layer"),
        (lambda p: encrypted_pdf(p / "locked.pdf"), "is encrypted"),
    ],
)
def test_pdf_refusals(tmp_path: Path, make: object, words: str) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    with pytest.raises(DocumentError, match=words):
        extract_file(path)


def test_damaged_pdf_is_refused_not_crashed(tmp_path: Path) -> None:
    data = text_pdf(tmp_path / "t.pdf", [TALE]).read_bytes()
    with pytest.raises(DocumentError, match="could not be read as a PDF|no text layer"):
        extract_bytes("cut.pdf", data[: len(data) // 3])


def test_binary_and_huge_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DocumentError, match="binary file"):
        extract_bytes("blob.bin", os.urandom(20_000))
    with pytest.raises(DocumentError, match="binary file"):
        extract_bytes("app.exe", b"MZ\x90\x00" + os.urandom(4000))
    huge = tmp_path / "huge.log"
    with huge.open("wb") as f:  # sparse: 500 MB on the file system, nothing read
        f.truncate(500 * 10**6)
    with pytest.raises(DocumentError, match=r"too large to attach \(476\.8 MiB; the limit is 64\.0 MiB\)"):
        extract_file(huge)
    assert MAX_FILE_BYTES < 500 * 10**6


def test_encodings() -> None:
    assert extract_bytes("a.txt", "naïve café\r\nline two  \n".encode()).text == "naïve café\nline two"
    assert extract_bytes("b.txt", "hello wörld".encode("utf-16")).text == "hello wörld"
    latin = "Le café crème et la crème brûlée, déjà vu à Noël. " * 8
    assert extract_bytes("c.txt", latin.encode("latin-1")).text == latin.strip()
    cyrillic = "Привет, как дела? Это тест кодировки. " * 6
    assert extract_bytes("d.txt", cyrillic.encode("cp1251")).text == cyrillic.strip()
    with pytest.raises(DocumentError, match="holds no text"):
        extract_bytes("empty.md", b"  \n\n")
    with pytest.raises(DocumentError, match="starts as UTF-16 text but is not"):
        extract_bytes("bad.txt", b"\xff\xfe\x00\xd8")


def test_html_and_docx() -> None:
    html = b"<!doctype html><html><head><title>T</title><script>x()</script></head><body><h1>Terms</h1><p>One &amp; two.</p></body></html>"
    doc = extract_bytes("page.html", html)
    assert doc.kind == "html" and "Terms" in doc.text and "One & two." in doc.text and "x()" not in doc.text
    body = ('<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
            "<w:p><w:r><w:t>First paragraph.</w:t></w:r></w:p><w:p><w:r><w:t>Second</w:t><w:tab/>"
            "<w:t>one.</w:t></w:r></w:p></w:body></w:document>")  # fmt: skip
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("word/document.xml", body)
    doc = extract_bytes("letter.docx", buf.getvalue())
    assert doc.kind == "docx" and doc.text == "First paragraph.\nSecond\tone."
    with pytest.raises(DocumentError, match="binary file"):
        extract_bytes("archive.zip", buf.getvalue()[:40] + os.urandom(100))


def test_layout_is_stable_and_ordered() -> None:
    a, b = Attached("a.txt", "alpha"), Attached('b "x".md', "beta")
    text = system_with_documents("Be brief.", [a, b])
    assert text == 'Be brief.\n\n<document name="a.txt">\nalpha\n</document>\n\n<document name="b x.md">\nbeta\n</document>'
    assert system_with_documents("", [a]) == '<document name="a.txt">\nalpha\n</document>'
    assert system_with_documents("Be brief.", []) == "Be brief."


def test_stored_once_with_the_chat(tmp_path: Path) -> None:
    storage = Storage(tmp_path / "db.sqlite")
    one, two = storage.create_conversation(), storage.create_conversation()
    storage.attach_document(one.id, "tale.txt", TALE)
    storage.attach_document(one.id, "notes.md", "# Notes")
    storage.copy_documents(one.id, two.id)
    assert [d.name for d in storage.documents(two.id)] == ["tale.txt", "notes.md"]
    reopened = Storage(tmp_path / "db.sqlite")  # a restart
    assert [d.text for d in reopened.documents(one.id)] == [TALE, "# Notes"]
    with reopened._session() as s:
        assert s.execute(sql_text("select count(*) from documents")).scalar() == 2
    assert '"name": "tale.txt"' in reopened.export_json(one.id)
    assert "- tale.txt" in reopened.export_markdown(one.id)
    reopened.remove_document(one.id, reopened.documents(one.id)[0].sha256)
    assert [d.name for d in reopened.documents(one.id)] == ["notes.md"]
    reopened.delete_conversation(one.id)
    reopened.delete_conversation(two.id)
    reopened.purge_deleted()
    with reopened._session() as s:
        assert s.execute(sql_text("select count(*) from documents")).scalar() == 0


def test_server_file_parts_parse_and_refuse_by_name() -> None:
    import base64

    from app.server.errors import ApiError
    from app.server.messages import parse_messages

    data = "data:text/plain;base64," + base64.b64encode(b"alpha").decode()
    (msg,) = parse_messages([{"role": "user", "content": [
        {"type": "file", "file": {"filename": "a.txt", "file_data": data}}, {"type": "text", "text": "Q"}]}])
    assert msg.content == "Q" and msg.files[0].filename == "a.txt" and msg.files[0].data == b"alpha"
    bad = [
        ({"type": "file", "file": {"file_id": "file-1"}}, "user", "file_id"),
        ({"type": "file", "file": {"filename": "a.txt", "file_data": "alpha"}}, "user", "data: URL"),
        ({"type": "file", "file": {"filename": "a.txt", "file_data": "data:x;base64,@@"}}, "user", "not base64"),
        ({"type": "file", "file": {"filename": "a.txt", "file_data": data}}, "system", "only 'text'"),
    ]
    for part, role, words in bad:
        with pytest.raises(ApiError, match=words):
            parse_messages([{"role": role, "content": [part]}])
