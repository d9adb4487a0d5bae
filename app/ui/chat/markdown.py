"""Split Markdown into prose and fenced code blocks, so code gets its own widget. No Qt."""

from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE = re.compile(r"^(\s{0,3})(```+|~~~+)\s*([\w+#.-]*)\s*$")


@dataclass(frozen=True, slots=True)
class Segment:
    kind: str  # "text" | "code"
    text: str
    language: str = ""
    closed: bool = True


def split_markdown(source: str) -> list[Segment]:
    """Prose and code segments in order; an unterminated fence (mid-stream) is still code."""
    segments: list[Segment] = []
    prose: list[str] = []
    code: list[str] = []
    fence = ""
    language = ""
    for line in source.split("\n"):
        match = _FENCE.match(line)
        if not fence:
            if match:
                if "".join(prose).strip():
                    segments.append(Segment("text", "\n".join(prose).strip("\n")))
                prose = []
                fence, language, code = match.group(2), match.group(3), []
            else:
                prose.append(line)
        elif match and match.group(2).startswith(fence) and not match.group(3):
            segments.append(Segment("code", "\n".join(code), language))
            fence = ""
        else:
            code.append(line)
    if fence:
        segments.append(Segment("code", "\n".join(code), language, closed=False))
    elif "".join(prose).strip():
        segments.append(Segment("text", "\n".join(prose).strip("\n")))
    return segments
