"""Write ``tests/file_durations.txt`` (seconds per test file) from a pytest JUnit XML report.

``tests/conftest.py`` hands the slowest files out first under ``make test``. Regenerate after
the suite changes shape::

    QT_QPA_PLATFORM=offscreen .venv/bin/python -m pytest -q -p no:cacheprovider -n logical \\
        --dist loadfile --no-loadscope-reorder --junitxml=/tmp/suite.xml
    .venv/bin/python -m tests.helpers.file_durations /tmp/suite.xml

Only the order matters (a loaded machine inflates every file alike); a file missing from the
list counts one second a test.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "file_durations.txt"
KEEP = 60  # the slowest files; the rest are cheap enough to fill in at the end


def test_file(classname: str) -> str | None:
    """``tests.ui.test_chat.TestX`` → ``tests/ui/test_chat.py`` (the longest prefix that exists)."""
    parts = classname.split(".")
    for n in range(len(parts), 0, -1):
        path = "/".join(parts[:n]) + ".py"
        if (ROOT / path).is_file():
            return path
    return None


def main(report: str) -> None:
    seconds: Counter[str] = Counter()
    for case in ET.parse(report).getroot().iter("testcase"):
        path = test_file(case.get("classname", ""))
        if path:
            seconds[path] += float(case.get("time", "0"))
    lines = [f"{s:.0f} {path}" for path, s in seconds.most_common(KEEP)]
    header = (
        "# seconds path: the slowest test files of a full run (tests/helpers/file_durations.py)\n"
    )
    OUT.write_text(header + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
