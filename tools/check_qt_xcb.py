"""Before ``make run``: does Qt's xcb platform plugin find every library it needs?

A fresh desktop (or a minimal install) may lack some of the X11 libraries Qt's xcb plugin
links to; Qt then stops with "Could not load the Qt platform plugin "xcb" … no Qt platform
plugin could be initialized" and a hint about QT_DEBUG_PLUGINS. This looks at the plugin the
venv's PySide6 ships (``ldd``, which follows its Qt libraries too) and, when something is
missing, prints the one ``apt-get install`` line that adds it, and exits 1.

Nothing is checked (exit 0) off Linux, when Qt will not use xcb (``QT_QPA_PLATFORM`` set to
another platform, or a Wayland session without DISPLAY), or when ``ldd`` is not there.

    python -m tools.check_qt_xcb
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGES = {
    "libxcb.so.1": "libxcb1",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libX11.so.6": "libx11-6",
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-glx.so.0": "libxcb-glx0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xinerama.so.0": "libxcb-xinerama0",
    "libxcb-xinput.so.0": "libxcb-xinput0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libdbus-1.so.3": "libdbus-1-3",
    "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1",
    "libOpenGL.so.0": "libopengl0",
    "libGLX.so.0": "libglx0",
    "libSM.so.6": "libsm6",
    "libICE.so.6": "libice6",
    "libglib-2.0.so.0": "libglib2.0-0",
}
"""The shared libraries Qt's xcb plugin and its Qt libraries load, and the Debian/Ubuntu
package of each."""

_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found", re.MULTILINE)


def missing_libraries(ldd_output: str) -> list[str]:
    """The libraries ``ldd`` could not find, each once, in its order."""
    return list(dict.fromkeys(_NOT_FOUND.findall(ldd_output)))


def install_line(missing: list[str]) -> str:
    """``sudo apt-get install …`` for ``missing`` (a library no package is known for is named
    as itself, for the reader to look up)."""
    packages = dict.fromkeys(PACKAGES.get(lib, lib) for lib in missing)
    return "sudo apt-get install " + " ".join(packages)


def xcb_plugin() -> Path | None:
    try:
        import PySide6
    except ImportError:
        return None
    plugin = Path(PySide6.__file__).parent / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    return plugin if plugin.is_file() else None


def uses_xcb(environ: dict[str, str]) -> bool:
    platform = environ.get("QT_QPA_PLATFORM", "")
    if platform:
        return platform.split(":")[0] == "xcb"
    return bool(environ.get("DISPLAY")) or not environ.get("WAYLAND_DISPLAY")


def main(environ: dict[str, str] | None = None) -> int:
    env = dict(os.environ if environ is None else environ)
    plugin = xcb_plugin()
    ldd = shutil.which("ldd")
    if not sys.platform.startswith("linux") or not uses_xcb(env) or plugin is None or ldd is None:
        return 0
    out = subprocess.run([ldd, str(plugin)], capture_output=True, text=True, check=False).stdout
    missing = missing_libraries(out)
    if not missing:
        return 0
    sys.stderr.write(
        f"Qt's xcb platform plugin cannot find {', '.join(missing)}, so the window would not open.\n"
        f"Install them with:\n\n    {install_line(missing)}\n\n"
        "(or run headless with QT_QPA_PLATFORM=offscreen)\n"
    )
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
