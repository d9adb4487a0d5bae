"""Issue 50, item 10: ``make run`` names the one ``apt-get install`` line that adds the
libraries Qt's xcb platform plugin cannot find, and stays quiet otherwise."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tools import check_qt_xcb

LDD = """\
\tlinux-vdso.so.1 (0x00007ffd)
\tlibQt6XcbQpa.so.6 => /venv/PySide6/Qt/lib/libQt6XcbQpa.so.6 (0x00007f)
\tlibxcb-icccm.so.4 => not found
\tlibxcb-cursor.so.0 => not found
\tlibxcb.so.1 => /lib/x86_64-linux-gnu/libxcb.so.1 (0x00007f)
\tlibxcb-icccm.so.4 => not found
\tlibweird.so.9 => not found
"""


def test_the_missing_libraries_become_one_install_line():
    missing = check_qt_xcb.missing_libraries(LDD)
    assert missing == ["libxcb-icccm.so.4", "libxcb-cursor.so.0", "libweird.so.9"]
    assert check_qt_xcb.install_line(missing) == "sudo apt-get install libxcb-icccm4 libxcb-cursor0 libweird.so.9"
    assert check_qt_xcb.missing_libraries(LDD.replace("not found", "/lib/x.so (0x1)")) == []


def test_only_an_xcb_session_is_checked():
    assert check_qt_xcb.uses_xcb({"DISPLAY": ":0"})
    assert check_qt_xcb.uses_xcb({"QT_QPA_PLATFORM": "xcb"})
    assert not check_qt_xcb.uses_xcb({"QT_QPA_PLATFORM": "offscreen", "DISPLAY": ":0"})
    assert not check_qt_xcb.uses_xcb({"WAYLAND_DISPLAY": "wayland-0"})
    assert check_qt_xcb.main({"QT_QPA_PLATFORM": "offscreen"}) == 0


@pytest.mark.skipif(shutil.which("ldd") is None or check_qt_xcb.xcb_plugin() is None, reason="needs ldd and PySide6's xcb plugin")
def test_on_this_machine_it_agrees_with_ldd(capsys):
    """The real plugin: exit 1 with the install line exactly when ``ldd`` finds a library missing."""
    plugin = check_qt_xcb.xcb_plugin()
    out = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True, check=False).stdout
    missing = check_qt_xcb.missing_libraries(out)
    code = check_qt_xcb.main({"DISPLAY": ":0"})
    err = capsys.readouterr().err
    assert code == (1 if missing else 0)
    if missing:
        assert check_qt_xcb.install_line(missing) in err
