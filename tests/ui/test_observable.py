"""The one observable list (app.ui.state.observable) and its one Qt adapter (qt_models.adapter):
every change is announced before and after, and a Qt model over it stays consistent —
including persistent indexes across moves and sorts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt

from app.ui.qt_models.adapter import ListAdapter
from app.ui.state.observable import ObservableList


@dataclass(frozen=True, slots=True)
class Item:
    id: str
    value: int


class Items(ObservableList[Item, str]):
    def __init__(self) -> None:
        super().__init__(lambda item: item.id)

    reset = ObservableList._reset
    insert = ObservableList._insert
    remove = ObservableList._remove
    replace = ObservableList._replace
    move = ObservableList._move

    def sort(self) -> None:
        self._relayout(sorted(self.items(), key=lambda i: i.value))


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def __getattr__(self, name: str):
        return lambda *args: self.events.append((name, *args))


class ItemsModel(ListAdapter, QAbstractTableModel):
    def __init__(self, items: Items) -> None:
        super().__init__()
        self.items = items
        self.observe(items)

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self.items)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else 2

    def data(self, index, role=Qt.ItemDataRole.DisplayRole) -> Any:
        if role != Qt.ItemDataRole.DisplayRole or not index.isValid():
            return None
        item = self.items[index.row()]
        return item.id if index.column() == 0 else str(item.value)


def _ids(items: Items) -> list[str]:
    return [i.id for i in items.items()]


def test_every_change_is_announced_with_qt_row_numbers():
    items = Items()
    rec = Recorder()
    items.add_listener(rec)
    items.reset([Item("a", 3), Item("b", 1), Item("a", 5)])  # a later duplicate key wins
    assert _ids(items) == ["a", "b"] and items.get("a") == Item("a", 5)
    items.insert(1, [Item("c", 2), Item("d", 0)])
    items.replace(0, Item("a", 9))
    items.move(0, 3)  # a to the end
    items.remove(0, 1)
    assert _ids(items) == ["b", "a"]
    assert items.position("a") == 1 and items.position("c") is None
    assert rec.events == [
        ("before_reset",), ("after_reset",),
        ("before_insert", 1, 2), ("after_insert",),
        ("changed", 0, 0),
        ("before_move", 0, 0, 4), ("after_move",),
        ("before_remove", 0, 1), ("after_remove",),
    ]  # fmt: skip


def test_the_adapter_keeps_a_qt_model_consistent(qtmodeltester):
    items = Items()
    model = ItemsModel(items)
    items.reset([Item(f"i{n}", 10 - n) for n in range(6)])
    qtmodeltester.check(model)
    followed = QPersistentModelIndex(model.index(1, 1))  # i1, value 9
    items.move(1, 4)
    assert followed.row() == 4 and followed.data() == "9"
    items.sort()
    assert [items[r].value for r in range(len(items))] == sorted(i.value for i in items.items())
    assert followed.row() == items.position("i1") and followed.data() == "9"
    items.insert(0, [Item("new", -1)])
    items.replace(2, Item(items[2].id, 42))
    items.remove(3, 4)
    qtmodeltester.check(model)
    assert model.rowCount() == len(items) == 5
    assert followed.isValid() == ("i1" in _ids(items))
