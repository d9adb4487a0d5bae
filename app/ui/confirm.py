"""Asking before something stops a reply that is being written (quit, unload)."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox, QWidget


def confirm_stop(parent: QWidget | None, title: str, text: str, action: str) -> bool:
    """Ask ``text``; True when the user chose ``action`` (Cancel is the default button, so a
    stray Enter stops nothing)."""
    box = QMessageBox(parent)
    box.setObjectName("confirmStopDialog")
    box.setIcon(QMessageBox.Icon.Question)
    box.setWindowTitle(title)
    box.setText(text)
    go = box.addButton(action, QMessageBox.ButtonRole.DestructiveRole)
    go.setObjectName("confirmButton")
    cancel = box.addButton(QMessageBox.StandardButton.Cancel)
    cancel.setObjectName("cancelButton")
    box.setDefaultButton(cancel)
    box.setEscapeButton(cancel)
    box.exec()
    return box.clickedButton() is go


def writing_words(titles: list[str]) -> str:
    """"“Trip to Lyon”", "“Trip to Lyon” and 2 other chats"."""
    first = f"“{titles[0]}”"
    rest = len(titles) - 1
    return first if rest == 0 else f"{first} and {rest} other chat{'s' if rest > 1 else ''}"
