"""The window appears at once; the default model loads behind it.

Reading a GGUF and building its llama.cpp context takes seconds (longer for a big model on a
cold disk), and nothing else needs it to draw the window. ``ModelLoading`` runs
``Engine.load_model`` as a coroutine on the GUI loop (the load itself on a worker thread)
and shows what is happening meanwhile: a "Loading …" line and a busy bar in the status bar,
the same words in the banner, and a composer that waits (you can read and switch chats). On
success the model joins the window by the same path a model loaded from the Models view
takes (``MainWindow.attach_model``); on failure the banner says why, as a synchronous
start did.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QLabel, QMainWindow, QProgressBar

from app.engine.config import ModelConfig
from app.ui.chat.chat_page import ChatPage
from app.ui.engine_api import EngineApi
from app.ui.tasks import TaskRunner
from app.ui.widgets.banner import NotificationBanner

log = logging.getLogger(__name__)


class LoadingWindow(Protocol):
    """What a load shows its progress in (``MainWindow`` is one)."""

    @property
    def status_model(self) -> QLabel: ...
    @property
    def chat_page(self) -> ChatPage: ...
    @property
    def banner(self) -> NotificationBanner: ...
    def show_error(self, text: str) -> None: ...
    def attach_model(self, model_id: str) -> None: ...


class ModelLoading(QObject):
    """Loads ``model_id`` (``make_config()`` builds its config) into ``engine`` for ``window``."""

    finished = Signal(str, str)  # model id, error text ("" when it loaded)

    def __init__(
        self,
        window: LoadingWindow,
        widget: QMainWindow,
        engine: EngineApi,
        model_id: str,
        make_config: Callable[[], ModelConfig],
        label: str,
    ) -> None:
        """``widget`` is ``window`` as the ``QMainWindow`` whose status bar holds the busy bar."""
        super().__init__(widget)
        self.window = window
        self.engine = engine
        self.model_id = model_id
        self.label = label
        self._make_config = make_config
        self._runner = TaskRunner(max_threads=1, parent=self)
        self.busy_bar = QProgressBar()
        self.busy_bar.setObjectName("modelLoadingBar")
        self.busy_bar.setRange(0, 0)  # indeterminate
        self.busy_bar.setTextVisible(False)
        self.busy_bar.setMaximumWidth(120)
        self.busy_bar.setMaximumHeight(10)
        self.busy_bar.hide()
        widget.statusBar().addPermanentWidget(self.busy_bar)
        self.is_loading = False

    def start(self) -> None:
        self._show_loading()
        self._runner.start(self._load(), name=f"load {self.model_id}")

    async def _load(self) -> None:
        try:
            config = self._make_config()
            await self._runner.call(lambda: self.engine.load_model(self.model_id, config))
        except Exception as exc:  # noqa: BLE001 - the window stays up and says why
            log.error("could not load the model %s", self.model_id, exc_info=exc)
            self._show_done()
            text = f"Could not load the model: {exc}"
            self.window.status_model.setText("No model loaded")
            self.window.show_error(text)
            self.finished.emit(self.model_id, text)
            return
        self._show_done()
        notice = self.engine.native_notice  # llama.cpp crashed in the probe: what runs instead
        if notice:
            self.window.banner.show_message(notice, kind="info")
        else:
            self.window.banner.dismiss()
        self.window.attach_model(self.model_id)
        self.finished.emit(self.model_id, "")

    def _show_loading(self) -> None:
        self.is_loading = True
        w = self.window
        text = f"Loading {self.label}…"
        w.status_model.setText(f"◌ {text}")
        w.chat_page.show_model_loading(self.label)
        w.banner.show_message(
            f"{text} Chats are ready to read; the composer opens when the model is.", kind="info"
        )
        composer = w.chat_page.composer
        self._placeholder = composer.input.placeholderText()
        composer.input.setPlaceholderText("The model is loading…")
        composer.setEnabled(False)
        self.busy_bar.show()

    def _show_done(self) -> None:
        self.is_loading = False
        self.busy_bar.hide()
        composer = self.window.chat_page.composer
        composer.input.setPlaceholderText(self._placeholder)
        composer.setEnabled(True)
        self.window.chat_page.show_model_loading(None)
