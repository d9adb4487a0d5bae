"""Issue 52: a ``file`` content part through the window's own server (the "Local server"
switch) lands where the app puts a chat's documents: the reply equals the one the app gave
for the same file and question, and a later request reports the document's tokens as
``cached_tokens``. Real window, tiny model, real uvicorn, the official ``openai`` client.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from typing import Any

import openai

from tests.helpers.documents import TALE, text_pdf
from tests.ui.conftest import ASCII_GRAMMAR, TEST_SAMPLING, WindowFactory
from tests.ui.helpers import current_id
from tests.ui.test_documents import ask, documents_read, drop, rows

QUESTION = "what was the age of wisdom"


def in_thread(qtbot: Any, call: Callable[[], Any]) -> Any:
    """``call()`` on a client thread while the GUI thread keeps processing events."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except Exception as exc:  # noqa: BLE001 — re-raised on the test's thread
            out["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    qtbot.waitUntil(lambda: not worker.is_alive(), timeout=120_000)
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_a_file_part_gets_the_apps_reply_and_its_tokens_cached(qtbot: Any, make_window: WindowFactory, tmp_path: Any) -> None:
    pdf = text_pdf(tmp_path / "tale.pdf", [TALE, "The second page. " + TALE[:200]])
    window = make_window()
    page = window.chat_page
    page.new_conversation()
    drop(window, [pdf])
    qtbot.waitUntil(lambda: len(rows(window)) == 1, timeout=60_000)
    documents_read(qtbot, window)
    app_reply = ask(qtbot, window, QUESTION)
    system = window.controller.conversation(current_id(window)).system_prompt

    window.local_server.start(0)
    qtbot.waitUntil(lambda: window.local_server.is_running, timeout=30_000)
    client = openai.OpenAI(base_url=window.local_server.status.url, api_key="unused", max_retries=0, timeout=120)
    data = "data:application/pdf;base64," + base64.b64encode(pdf.read_bytes()).decode("ascii")
    s = TEST_SAMPLING

    def chat(question: str) -> Any:
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": [
            {"type": "file", "file": {"filename": "tale.pdf", "file_data": data}},
            {"type": "text", "text": question},
        ]})  # fmt: skip
        return client.chat.completions.create(
            model="tiny", messages=messages, max_tokens=s.max_tokens, temperature=s.temperature,
            top_p=s.top_p, extra_body={"top_k": s.top_k, "min_p": s.min_p, "grammar": ASCII_GRAMMAR,
                                       "repetition_penalty": s.repetition_penalty},
        )  # fmt: skip

    served = in_thread(qtbot, lambda: chat(QUESTION))
    assert app_reply.content.strip() and served.choices[0].message.content == app_reply.content
    assert served.usage.prompt_tokens == app_reply.stats.prompt_tokens
    other = in_thread(qtbot, lambda: chat("and the season of darkness"))
    cached = other.usage.prompt_tokens_details.cached_tokens
    head = app_reply.stats.prompt_tokens - 12  # the system message with the document, at the least
    assert cached >= head, (cached, head, other.usage)

    bad = {"type": "file", "file": {"filename": "blob.bin", "file_data": "data:application/octet-stream;base64,"
                                    + base64.b64encode(bytes(range(256)) * 8).decode("ascii")}}  # fmt: skip
    try:
        in_thread(qtbot, lambda: client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": [bad, {"type": "text", "text": "hi"}]}]))
        raise AssertionError("a binary file was accepted")
    except openai.BadRequestError as err:
        assert "blob.bin looks like a binary file" in str(err) and err.body["param"] == "messages[0].content[0].file"  # type: ignore[index]
    window.local_server.stop()
    qtbot.waitUntil(lambda: window.local_server.status.state == "off", timeout=30_000)
