"""Render a conversation's view into prompt tokens with the model's own chat template.

``PromptBuilder`` is what ``app.conversation.window.plan_window`` measures with: it renders
``system prompt`` + ``summary`` + ``turns[start:]`` and tokenizes it, remembering each
rendering for the life of one request (the planner asks for a few starts, then the chosen
one is sent). Runs on a model's bridge thread, the only UI-side caller of the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from app.conversation.window import (
    SUMMARY_OPENING,
    Budget,
    Message,
    OverflowPolicy,
    Turn,
    WindowPlan,
    WindowState,
    fitted_summary_request,
    plan_window,
    view_messages,
)
from app.engine.errors import InvalidRequest


class TemplateModel(Protocol):
    def apply_chat_template(self, request: dict[str, object]) -> list[int]: ...

    def tokenize(self, text: str) -> list[int]: ...


Shape = Callable[[list[Message], str], tuple[list[dict[str, Any]], str, list[dict[str, Any]] | None]]
"""Rewrites a view's template messages and system prompt for a chat that offers tools, and
gives the tools to render (``app.tools.prompt.ToolShape``)."""


class PromptBuilder:
    """The prompt tokens of one conversation's possible views.

    With ``continue_reply`` the last turn is a reply cut at the context end: the view is
    rendered up to the user turn before it (the template then opens the assistant turn) and
    the reply's own tokens follow, so the model goes on writing the same message. When even
    that reply does not fit beside its question, only its last tokens are kept (the policy's
    cut applied inside the reply, as llama.cpp's context shift does).
    ``merge_summary`` puts a summary inside the system prompt for templates that refuse a
    second system message; it turns on by itself the first time a template refuses.
    """

    def __init__(
        self,
        model: TemplateModel,
        system: str,
        turns: Sequence[Turn],
        *,
        continue_reply: bool = False,
        merge_summary: bool = False,
        shape: Shape | None = None,
    ) -> None:
        self.model = model
        self.shape = shape
        self.system = system
        self.turns = list(turns)
        self.continue_reply = continue_reply and len(self.turns) > 1
        self.merge_summary = merge_summary
        self.reply_tail: int | None = None
        """For a continued reply: how many of its last tokens the view keeps (None: all)."""
        self._rendered: dict[tuple[int, str], list[int]] = {}

    def tokens(self, start: int, summary: str) -> list[int]:
        key = (start, summary)
        cached = self._rendered.get(key)
        if cached is None:
            cached = self._render(start, summary)
            self._rendered[key] = cached
        return cached

    def count(self, start: int, summary: str) -> int:
        return len(self.tokens(start, summary))

    def plan(self, state: WindowState, budget: Budget, policy: OverflowPolicy) -> WindowPlan:
        plan = plan_window(self.turns, state, self.count, budget, policy)
        if plan.kind != "too_long" or not self.continue_reply or policy is OverflowPolicy.STOP:
            return plan
        # The question and the cut reply alone are too long: keep the reply's end.
        head = self.count(plan.start, "") - len(self._reply_ids())
        self.reply_tail = max(1, budget.target - head)
        self._rendered.clear()
        return WindowPlan("cut", plan.start, "", self.count(plan.start, ""))

    def _render(self, start: int, summary: str) -> list[int]:
        turns = self.turns[:-1] if self.continue_reply else self.turns
        try:
            ids = self._template(turns, start, summary)
        except InvalidRequest:
            if not summary or self.merge_summary:
                raise
            self.merge_summary = True  # this template takes one system message, first
            ids = self._template(turns, start, summary)
        if self.continue_reply:
            reply = self._reply_ids()
            ids = ids + (reply[-self.reply_tail :] if self.reply_tail else reply)
        return ids

    def _reply_ids(self) -> list[int]:
        return self.reply_ids(self.turns[-1].content)

    def _template(self, turns: Sequence[Turn], start: int, summary: str) -> list[int]:
        messages, extra = view_messages(turns, start, summary, merge_summary=self.merge_summary)
        request: dict[str, object] = {"messages": messages}
        system = self.system + extra
        if self.shape is not None:
            request["messages"], system, tools = self.shape(messages, system)
            if tools:
                request["tools"] = tools
        if system:
            request["system"] = system
        return list(self.model.apply_chat_template(request))

    def reply_ids(self, text: str) -> list[int]:
        """``text`` as tokens inside a reply: without the BOS the tokenizer may prepend."""
        ids = list(self.model.tokenize(text))
        head = list(self.model.tokenize(""))
        return ids[len(head) :] if head and ids[: len(head)] == head else ids

    def summary_prompt(self, turns: Sequence[Turn], previous: str, limit: int) -> list[int]:
        """The prompt asking for a summary of ``turns``, cut to ``limit`` tokens; it ends
        with the summary's first words (``SUMMARY_OPENING``), which the reply goes on from."""
        opening = self.reply_ids(SUMMARY_OPENING)

        def render(messages: list[Message]) -> list[int]:
            return list(self.model.apply_chat_template({"messages": list(messages)})) + opening

        return render(fitted_summary_request(turns, previous, lambda m: len(render(m)), limit))
