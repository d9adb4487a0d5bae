"""Where Hearth's bundled files live: one lookup for icons, themes and default settings.

``resource_path("icons", "hearth.svg")`` resolves against the ``resources/`` folder wherever
it is, never against the working directory:

1. a PyInstaller bundle: ``sys._MEIPASS/resources`` (the spec copies the folder there);
2. a source checkout or an editable install: ``resources/`` next to the ``app`` package;
3. an installed wheel: ``<prefix>/share/hearth/resources`` (pyproject's ``data-files``),
   found through the installed distribution's file list, so ``--user`` and ``--prefix``
   installs work too.

No Qt here: the engine-side code and ``hearth --self-test`` use it headless.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import sys
from pathlib import Path
from typing import Any

DISTRIBUTION = "hearth"
DATA_SUBDIR = ("share", "hearth", "resources")
_MARKER = ("icons", "hearth.svg")  # a file only Hearth's resources/ folder has
ICON_SIZES = (16, 32, 48, 64, 128, 256, 512)


def _candidates() -> list[Path]:
    found: list[Path] = []
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        found.append(Path(bundle) / "resources")
    found.append(Path(__file__).resolve().parent.parent / "resources")
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        found.append(Path(prefix).joinpath(*DATA_SUBDIR))
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return found
    marker = "/".join((*DATA_SUBDIR, *_MARKER))
    for entry in dist.files or ():
        if str(entry).replace("\\", "/").endswith(marker):
            located = Path(str(dist.locate_file(entry))).resolve()
            found.append(located.parents[len(_MARKER) - 1])
            break
    return found


@functools.cache
def resources_root() -> Path:
    """The ``resources/`` folder in use; FileNotFoundError listing the places searched."""
    candidates = _candidates()
    for root in candidates:
        if root.joinpath(*_MARKER).is_file():
            return root
    searched = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(f"Hearth's resources folder was not found (searched: {searched})")


def resource_path(*parts: str) -> Path:
    """Absolute path of a bundled resource, e.g. ``resource_path("defaults", "settings.json")``.

    The path is returned whether or not the file exists, so optional resources (a theme the
    user may not have) can be probed with ``.is_file()``.
    """
    return resources_root().joinpath(*parts)


def app_icon_path(size: int | None = None) -> Path:
    """The application icon: the SVG, or the PNG rendered at ``size`` (one of ICON_SIZES)."""
    if size is None:
        return resource_path("icons", "hearth.svg")
    if size not in ICON_SIZES:
        raise ValueError(f"no {size}px icon; sizes: {', '.join(map(str, ICON_SIZES))}")
    return resource_path("icons", f"hearth-{size}.png")


def load_default_settings() -> dict[str, Any]:
    """``resources/defaults/settings.json``: model, cache policy, quotas and sampling defaults."""
    data: dict[str, Any] = json.loads(resource_path("defaults", "settings.json").read_text("utf-8"))
    data.pop("comment", None)
    return data
