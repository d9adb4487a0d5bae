"""The Download page: Hub search, a quant picker for the chosen repo, and the downloads list."""

from __future__ import annotations

import asyncio
import logging
import socket
from urllib.parse import urlsplit

from PySide6.QtCore import QItemSelection, Qt, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListView,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.models.hub import DEFAULT_ENDPOINT, HubClient, HubError, RemoteFile, RepoInfo
from app.ui.models.download_delegate import DownloadDelegate
from app.ui.models.downloads import DownloadManager
from app.ui.models.widgets import MessageCard, beside_card, button, caption, section, side_card
from app.ui.qt_models.download_list import ITEM_ROLE, DownloadListModel
from app.ui.qt_models.model_hub import HubResultsModel
from app.ui.state.downloads import DownloadItem
from app.ui.tasks import TaskRunner
from app.units import human_bytes

log = logging.getLogger(__name__)

FILE_ROLE = Qt.ItemDataRole.UserRole + 1


class HubPage(QWidget):
    """Searches and lists files as coroutines on the GUI loop (the blocking Hub calls run on
    the ``TaskRunner``'s threads); a newer search cancels an older one. Downloads go to the
    manager."""

    search_finished = Signal(int)  # number of results
    files_listed = Signal(str, int)  # repo id, number of GGUF files

    def __init__(
        self,
        hub: HubClient,
        downloads: DownloadManager,
        runner: TaskRunner,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("hubPage")
        self.hub = hub
        self.downloads = downloads
        self.runner = runner
        self._search_task: asyncio.Task[None] | None = None
        self._files_task: asyncio.Task[None] | None = None
        self._host = urlsplit(hub.endpoint).hostname or ""
        self._network_checked = False
        self.results_model = HubResultsModel()
        self.download_model = DownloadListModel(downloads.items)

        self.search_field = QLineEdit()
        self.search_field.setObjectName("hubSearch")
        self.search_field.setPlaceholderText("Search GGUF models on the Hub, e.g. “qwen 0.5b”")
        self.search_field.setClearButtonEnabled(True)
        self.search_button = button("Search", "searchButton", primary=True)
        search_row = QHBoxLayout()
        search_row.addWidget(self.search_field, 1)
        search_row.addWidget(self.search_button)

        self.results = QTableView()
        self.results.setObjectName("hubResults")
        self.results.setModel(self.results_model)
        self.results.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.results.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.results.setShowGrid(False)
        self.results.verticalHeader().hide()
        self.results.verticalHeader().setDefaultSectionSize(30)
        header = self.results.horizontalHeader()
        header.setHighlightSections(False)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)

        top = QHBoxLayout()
        top.setSpacing(16)
        beside_card(top, self.results, self._build_files_card())

        self.download_list = QListView()
        self.download_list.setObjectName("downloadList")
        self.download_list.setModel(self.download_model)
        self.download_list.setItemDelegate(DownloadDelegate(self.download_list))
        self.download_list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.download_list.setUniformItemSizes(True)
        self.pause_button = button("Pause", "pauseButton")
        self.resume_button = button("Resume", "resumeButton")
        self.cancel_button = button("Cancel", "cancelDownloadButton")
        self.clear_button = button("Clear finished", "clearFinishedButton")
        actions = QHBoxLayout()
        actions.addWidget(section("Downloads"))
        actions.addWidget(caption("Verified against the Hub's SHA-256 before they reach the "
                                  "library; paused downloads continue after a restart."), 1)
        for b in (self.pause_button, self.resume_button, self.cancel_button, self.clear_button):
            actions.addWidget(b)

        self.error_card = MessageCard("hubError")

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(10)
        layout.addLayout(search_row)
        where = "the Hugging Face Hub" if hub.endpoint == DEFAULT_ENDPOINT else hub.endpoint
        token = "with your token" if hub.token else "without a token (set HF_TOKEN for private " \
            "or gated repositories)"
        layout.addWidget(caption(f"GGUF repositories on {where}, searched {token}."))
        layout.addWidget(self.error_card)
        layout.addLayout(top, 1)
        layout.addLayout(actions)
        layout.addWidget(self.download_list, 1)

        self.search_field.returnPressed.connect(self.search)
        self.search_button.clicked.connect(self.search)
        self.results.selectionModel().selectionChanged.connect(self._on_result_selected)
        self.download_button.clicked.connect(self._on_download_clicked)
        self.quant_picker.currentIndexChanged.connect(self._on_quant_changed)
        self.pause_button.clicked.connect(lambda: self._act(self.downloads.pause))
        self.resume_button.clicked.connect(lambda: self._act(self.downloads.resume))
        self.cancel_button.clicked.connect(lambda: self._act(self.downloads.cancel))
        self.clear_button.clicked.connect(self.downloads.clear_finished)
        self.download_list.selectionModel().selectionChanged.connect(
            lambda *_: self._refresh_actions())
        self.download_model.dataChanged.connect(lambda *_: self._refresh_actions())
        self.download_model.rowsInserted.connect(self._on_download_inserted)
        self.download_model.rowsRemoved.connect(lambda *_: self._refresh_actions())
        downloads.download_failed.connect(self._on_download_failed)
        downloads.download_finished.connect(self._on_download_finished)
        self._refresh_actions()

    def _build_files_card(self) -> QFrame:
        card, v = side_card()
        self.repo_title = QLabel("No repository selected")
        self.repo_title.setObjectName("cardTitle")
        self.repo_title.setWordWrap(True)
        v.addWidget(self.repo_title)
        v.addWidget(section("Quantisation"))
        self.quant_picker = QComboBox()
        self.quant_picker.setObjectName("quantPicker")
        self.quant_picker.setEnabled(False)
        v.addWidget(self.quant_picker)
        self.file_info = caption("Lower quants are smaller and faster; Q4_K_M is a good "
                                 "default, Q8_0 is close to the original.")
        v.addWidget(self.file_info)
        self.download_button = button("Download", "downloadButton", primary=True)
        self.download_button.setEnabled(False)
        v.addWidget(self.download_button)
        v.addStretch(1)
        return card

    # -- the network, up front ------------------------------------------------------------------

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        if not self._network_checked:  # once: the first time the page is opened
            self._network_checked = True
            self.runner.start(self._check_network(), name="hub network check")

    async def _check_network(self) -> None:
        """Say "no network" before any search when the Hub's name does not resolve (a search
        showed a raw "[Errno -2] Name or service not known", and only after it failed)."""
        host = self._host
        if not host:
            return
        try:
            await self.runner.call(lambda: socket.getaddrinfo(host, None))
        except OSError as err:
            if _unresolved(err) and not self.error_card.text():
                self.error_card.show_text(no_network_words(host))

    # -- search -------------------------------------------------------------------------------

    def search(self) -> None:
        """Search the Hub for the field's text; a newer search replaces one still running."""
        query = self.search_field.text().strip()
        if self._search_task is not None:
            self._search_task.cancel()
        self.error_card.clear()
        self.search_button.setEnabled(False)
        self.search_button.setText("Searching…")
        self._search_task = self.runner.start(self._search(query), name="hub search")

    async def _search(self, query: str) -> None:
        try:
            results: list[RepoInfo] = await self.runner.call(lambda: self.hub.search(query, 50))
        except asyncio.CancelledError:
            raise  # a newer search took over; it resets the button
        except Exception as err:  # noqa: BLE001 - every failure is shown on the page
            self._reset_search_button()
            self.error_card.show_text(_message(err, "Search failed", self._host))
            self.search_finished.emit(0)
            return
        self._reset_search_button()
        self.results_model.set_results(results)
        self._clear_files("No repository selected" if results else "No GGUF repositories found")
        self.search_finished.emit(len(results))

    def _reset_search_button(self) -> None:
        self.search_button.setEnabled(True)
        self.search_button.setText("Search")

    # -- files --------------------------------------------------------------------------------

    def select_repo(self, repo_id: str) -> bool:
        for row in range(self.results_model.rowCount()):
            if self.results_model.result(row).id == repo_id:
                self.results.selectRow(row)
                return True
        return False

    def _on_result_selected(self, _sel: QItemSelection, _desel: QItemSelection) -> None:
        rows = self.results.selectionModel().selectedRows()
        if not rows:
            return
        repo_id = self.results_model.result(rows[0].row()).id
        if self._files_task is not None:
            self._files_task.cancel()  # another repository was picked meanwhile
        self._clear_files(repo_id)
        self.file_info.setText("Listing files…")
        self._files_task = self.runner.start(self._list_files(repo_id), name="hub files")

    async def _list_files(self, repo_id: str) -> None:
        try:
            files: list[RemoteFile] = await self.runner.call(lambda: self.hub.list_files(repo_id))
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - shown on the page
            self._clear_files("Could not list files")
            self.error_card.show_text(_message(err, "Could not list the files", self._host))
            return
        self.quant_picker.blockSignals(True)
        self.quant_picker.clear()
        for f in sorted(files, key=lambda f: (f.size or 0, f.filename)):
            quant = f.quant.upper() if f.quant else "?"
            self.quant_picker.addItem(f"{quant}  ·  {human_bytes(f.size)}  ·  {f.filename}")
            self.quant_picker.setItemData(self.quant_picker.count() - 1, f, FILE_ROLE)
        self.quant_picker.blockSignals(False)
        self.quant_picker.setEnabled(bool(files))
        self._on_quant_changed()
        if not files:
            self.file_info.setText("This repository has no GGUF files.")
        self.files_listed.emit(repo_id, len(files))

    def _clear_files(self, title: str) -> None:
        self.repo_title.setText(title)
        self.quant_picker.clear()
        self.quant_picker.setEnabled(False)
        self.download_button.setEnabled(False)

    def pick_quant(self, quant: str) -> bool:
        """Select the file whose quant is ``quant`` (case-insensitive)."""
        for i in range(self.quant_picker.count()):
            f = self.quant_picker.itemData(i, FILE_ROLE)
            if isinstance(f, RemoteFile) and (f.quant or "").lower() == quant.lower():
                self.quant_picker.setCurrentIndex(i)
                return True
        return False

    def selected_file(self) -> RemoteFile | None:
        f = self.quant_picker.currentData(FILE_ROLE)
        return f if isinstance(f, RemoteFile) else None

    def _on_quant_changed(self, *_: object) -> None:
        f = self.selected_file()
        self.download_button.setEnabled(f is not None)
        if f is not None:
            installed = self.hub.installed_path(f.repo_id, f.filename).is_file()
            sha = (f"SHA-256 {f.sha256[:12]}…" if f.sha256 else "no LFS hash (git blob check)" if f.blob_id
                   else "no checksum on the Hub: this file cannot be verified")
            self.file_info.setText(f"{f.filename}\n{human_bytes(f.size)} · {sha}"
                                   + ("\nAlready in your library." if installed else ""))

    def _on_download_clicked(self) -> None:
        f = self.selected_file()
        if f is None:
            return
        self.error_card.clear()
        self.downloads.start(f.repo_id, f.filename, f.size)

    def _on_download_finished(self, _item: DownloadItem) -> None:
        self._on_quant_changed()  # "Already in your library"

    # -- downloads list -------------------------------------------------------------------------

    def _selected_download(self) -> DownloadItem | None:
        rows = self.download_list.selectionModel().selectedRows()
        if not rows:
            return None
        item = rows[0].data(ITEM_ROLE)
        return item if isinstance(item, DownloadItem) else None

    def _act(self, action: object) -> None:
        item = self._selected_download()
        if item is not None and callable(action):
            action(item.id)

    def _on_download_inserted(self, *_: object) -> None:
        last = self.download_model.index(self.download_model.rowCount() - 1, 0)
        self.download_list.setCurrentIndex(last)
        self._refresh_actions()

    def _refresh_actions(self) -> None:
        item = self._selected_download()
        self.pause_button.setEnabled(item is not None and item.can_pause)
        self.resume_button.setEnabled(item is not None and item.can_resume)
        self.cancel_button.setEnabled(item is not None)
        self.clear_button.setEnabled(any(d.state.value == "finished"
                                         for d in self.downloads.downloads))

    def _on_download_failed(self, item: DownloadItem) -> None:
        self.error_card.show_text(f"{item.filename}: {item.error}")


NAME_NOT_RESOLVED = ("Name or service not known", "Temporary failure in name resolution",
                     "nodename nor servname", "No address associated with hostname", "getaddrinfo failed")
"""What a failed name lookup says (glibc, macOS, Windows): the machine has no network, or no
DNS, so the Hub's name does not resolve."""


def no_network_words(host: str) -> str:
    return (f"No network: {host} cannot be found (its name does not resolve). Searching and "
            "downloading need a connection to it; the models in the Library work without one.")


def _unresolved(err: BaseException) -> bool:
    """``err`` (or what caused it) is a failed name lookup."""
    seen: BaseException | None = err
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, socket.gaierror) or any(t in str(seen) for t in NAME_NOT_RESOLVED):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _message(err: Exception, what: str, host: str = "") -> str:
    if host and _unresolved(err):
        return no_network_words(host)
    if isinstance(err, HubError):
        return err.message
    return f"{what}: {err}"
