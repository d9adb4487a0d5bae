"""The agent loop's decisions, apart from any UI: which tools a chat offers the model, what a
call needs before it runs (the user's consent, arguments that match the tool's schema), what
the model is told afterwards (a bounded result, a denial, an error), and how many steps the
turn has taken. No Qt.

Consent comes only from the user's own choices (``ChatTools.always``, the approval dialog);
nothing a tool returns or a model writes can change them: a result that asks for another call
gets that call asked about like any other.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.server.messages import ToolCall, ToolSpec
from app.tools.config import ChatTools, ServerConfig
from app.tools.host import ToolInfo

MAX_TOOLS = 128
"""As the server: more tools than this are not offered (the first ones are)."""


@dataclass(frozen=True, slots=True)
class Route:
    """Where an offered tool runs: its server and its name there."""

    server: ServerConfig
    tool: ToolInfo

    @property
    def key(self) -> str:
        """What "Always allow" remembers: the server and the tool."""
        return f"{self.server.id}/{self.tool.name}"


@dataclass(frozen=True, slots=True)
class Offer:
    """The tools one request offers the model, by the names the model sees."""

    specs: tuple[ToolSpec, ...] = ()
    routes: tuple[tuple[str, Route], ...] = ()

    def route(self, name: str) -> Route | None:
        return next((r for n, r in self.routes if n == name), None)


def offer(servers: Sequence[tuple[ServerConfig, Sequence[ToolInfo]]]) -> Offer:
    """The tools of the chat's running servers. A name two servers share gets its server's
    name in front (``calc_add``) so the model can tell them apart."""
    counts: dict[str, int] = {}
    for _server, tools in servers:
        for t in tools:
            counts[t.name] = counts.get(t.name, 0) + 1
    specs: list[ToolSpec] = []
    routes: list[tuple[str, Route]] = []
    for server, tools in servers:
        for t in tools:
            name = t.name if counts[t.name] == 1 else f"{_ident(server.name)}_{t.name}"
            name = name[:64]
            if len(specs) >= MAX_TOOLS or any(n == name for n, _ in routes):
                continue
            schema = dict(t.input_schema) if isinstance(t.input_schema, dict) else {"type": "object"}
            specs.append(ToolSpec(name, t.description, schema))
            routes.append((name, Route(server, t)))
    return Offer(tuple(specs), tuple(routes))


def _ident(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_") or "server"


@dataclass(frozen=True, slots=True)
class PlannedCall:
    """One call of a reply, checked: ``problem`` says why it cannot run (then nobody is asked)."""

    call: ToolCall
    route: Route | None
    arguments: dict[str, Any]
    problem: str = ""

    @property
    def pretty_arguments(self) -> str:
        if self.problem and not self.arguments:
            return self.call.arguments
        return json.dumps(self.arguments, indent=2, ensure_ascii=False)


def plan_calls(calls: Sequence[ToolCall], tools: Offer) -> list[PlannedCall]:
    """Each call with its route and parsed arguments, checked against the tool's schema."""
    out = []
    for call in calls:
        route = tools.route(call.name)
        if route is None:
            out.append(PlannedCall(call, None, {}, f"there is no tool named {call.name}"))
            continue
        args, problem = check_arguments(call.arguments, route.tool.input_schema)
        out.append(PlannedCall(call, route, args, problem))
    return out


def check_arguments(text: str, schema: Any) -> tuple[dict[str, Any], str]:
    """The arguments as an object and "" when they are valid for ``schema``; else why not."""
    import jsonschema

    try:
        args = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        return {}, f"the arguments are not JSON ({exc})"
    if not isinstance(args, dict):
        return {}, "the arguments are not a JSON object"
    try:
        jsonschema.validate(args, schema if isinstance(schema, dict) else {"type": "object"})
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        return args, f"the arguments do not match the tool's schema ({where + ': ' if where else ''}{exc.message})"
    except jsonschema.SchemaError as exc:
        return args, f"the tool's schema is not valid JSON Schema ({exc.message})"
    return args, ""


def needs_consent(planned: PlannedCall, chat: ChatTools) -> bool:
    """Every runnable call asks, unless the user chose "Always allow" for its tool in this chat."""
    return planned.route is not None and planned.route.key not in chat.always


# -- what the model is told ------------------------------------------------------------------


def bounded(text: str, limit: int, total: int | None = None) -> str:
    """``text`` cut to ``limit`` characters, saying so at the end; ``total``: how long it was
    before something cut it already (the server's guard)."""
    total = max(total or 0, len(text))
    if total <= limit:
        return text
    return (text[:limit] + f"\n[… cut: the tool returned {total:,} characters; "
            f"the first {min(limit, len(text)):,} are shown]")  # fmt: skip


def result_message(text: str, is_error: bool, limit: int, total: int | None = None) -> str:
    body = bounded(text, limit, total)
    return f"The tool reported an error: {body}" if is_error else body


def denied_message(name: str) -> str:
    return f"The user denied this call to {name}; it did not run."


def stopped_message(name: str, *, running: bool = False) -> str:
    if running:
        return f"The user stopped this call to {name} while it ran; what it did is not known."
    return f"The user stopped the reply before this call to {name} ran."


def problem_message(name: str, problem: str) -> str:
    return f"The call to {name} was not run: {problem}."


def failed_message(name: str, error: str) -> str:
    return f"The call to {name} failed: {error}."


# -- the turn --------------------------------------------------------------------------------


def steps_taken(roles: Sequence[str]) -> int:
    """How many tool steps the current turn took: the runs of tool messages since the last
    user message (``roles``: the branch's roles, root first)."""
    steps = 0
    previous = ""
    for role in roles:
        if role == "user":
            steps = 0
        elif role == "tool" and previous != "tool":
            steps += 1
        previous = role
    return steps


def tool_choice(chat: ChatTools, roles: Sequence[str]) -> str:
    """``required`` when the chat forces a call for this reply, else ``auto``."""
    if chat.force_call == "every" or (chat.force_call == "first" and roles and roles[-1] == "user"):
        return "required"
    return "auto"


def call_labels(branch: Sequence[tuple[str, str]]) -> list[str]:
    """For each message of ``branch`` ((role, content), root first): the name of the call a
    tool message answers ("" for the others). The k-th tool message after a reply answers its
    k-th call."""
    from app.tools.prompt import calls_in

    labels: list[str] = []
    calls: list[ToolCall] = []
    k = 0
    for role, content in branch:
        if role == "assistant":
            calls, k = calls_in(content), 0
            labels.append("")
        elif role == "tool":
            labels.append(calls[k].name if k < len(calls) else "")
            k += 1
        else:
            labels.append("")
    return labels
