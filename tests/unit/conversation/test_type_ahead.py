"""What type-ahead reads of a draft, and its setting (app-wide and per chat)."""

from __future__ import annotations

from pathlib import Path

from app.conversation.type_ahead import MARGIN, TypeAheadSetting, readable_prefix, with_draft
from app.conversation.window import Turn
from app.storage import Storage


def test_the_readable_prefix_stops_where_the_draft_and_the_probed_draft_part():
    prompt = [1, 2, 3, 4, 5, 6, 90, 91]  # ... the draft's last word (6), end of turn, header
    probed = [1, 2, 3, 4, 5, 7, 90, 91]  # the last word merged with the probe
    assert readable_prefix(prompt, probed) == [1, 2, 3, 4, 5][: 5 - MARGIN]
    assert readable_prefix(prompt, probed, margin=0) == [1, 2, 3, 4, 5]
    assert readable_prefix([1, 2], [1, 3]) == []  # never a negative cut


def test_the_draft_is_the_last_user_turn():
    turns = (Turn("a", "user", "hi"), Turn("b", "assistant", "hello"))
    assert with_draft(turns, "and then?")[-1] == Turn("draft", "user", "and then?")
    assert with_draft(turns, "x")[:2] == turns


def test_on_unless_turned_off_app_wide_or_per_chat(tmp_path: Path):
    storage = Storage(tmp_path / "app.db")
    setting = TypeAheadSetting(storage)
    assert setting.default() and setting.enabled("c1") and setting.own("c1") is None
    setting.set_own("c1", False)
    assert not setting.enabled("c1") and setting.enabled("c2")
    setting.set_default(False)
    assert not setting.enabled("c2")
    setting.set_own("c2", True)
    assert setting.enabled("c2")
    setting.set_own("c2", None)
    assert not setting.enabled("c2") and setting.own("c2") is None
    storage.close()
