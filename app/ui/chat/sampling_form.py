"""The chat-settings form: a system prompt and the sampling options (docs/design.md §1 names).

One widget serves the per-conversation panel and the Settings dialog's "new chats" page, so
both edit the same fields the same way; ``edited`` fires on any change the user makes
(not while :meth:`load` fills it in).
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QPlainTextEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.storage import SamplingSettings
from app.ui.widgets.elided import ElidedComboBox


class ChatSettingsForm(QWidget):
    edited = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatSettingsForm")
        self._loading = False
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(8)

        layout.addWidget(section("SYSTEM PROMPT"))
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setObjectName("systemPromptEdit")
        self.system_prompt.setPlaceholderText("You are a helpful assistant.")
        self.system_prompt.setFixedHeight(90)
        layout.addWidget(self.system_prompt)

        layout.addWidget(section("SAMPLING"))
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft)
        form.setHorizontalSpacing(12)
        self.temperature = _dspin(0.0, 2.0, 0.05, 2)
        self.top_k = _ispin(0, 1000)
        self.top_p = _dspin(0.0, 1.0, 0.01, 2)
        self.min_p = _dspin(0.0, 1.0, 0.01, 2)
        self.repetition_penalty = _dspin(0.5, 2.0, 0.01, 2)
        self.seed = _ispin(-1, 2_000_000_000)
        self.seed.setSpecialValueText("random")
        self.max_tokens = _ispin(1, 32768)
        for label, widget in (
            ("Temperature", self.temperature),
            ("Top-k", self.top_k),
            ("Top-p", self.top_p),
            ("Min-p", self.min_p),
            ("Repetition penalty", self.repetition_penalty),
            ("Seed", self.seed),
            ("Max tokens", self.max_tokens),
        ):
            form.addRow(label, widget)
        layout.addLayout(form)

        layout.addWidget(section("STOP STRINGS (ONE PER LINE)"))
        self.stop_strings = QPlainTextEdit()
        self.stop_strings.setFixedHeight(54)
        layout.addWidget(self.stop_strings)

        layout.addWidget(section("STRUCTURED OUTPUT"))
        self.json_mode = QCheckBox("JSON mode")
        layout.addWidget(self.json_mode)
        self.grammar = QPlainTextEdit()
        self.grammar.setPlaceholderText("GBNF grammar (optional)")
        self.grammar.setFixedHeight(70)
        layout.addWidget(self.grammar)

        layout.addWidget(section("THINKING"))
        self.thinking = QCheckBox("Let the model think first")
        self.thinking_budget = _ispin(0, 32768)
        self.thinking_budget.setSpecialValueText("no limit")
        budget = QFormLayout()
        budget.addRow("Budget (tokens)", self.thinking_budget)
        layout.addWidget(self.thinking)
        layout.addLayout(budget)

        layout.addWidget(section("SPECULATIVE DECODING"))
        self.speculative = QCheckBox("Draft ahead and check")
        self.speculative.setObjectName("speculativeCheck")
        self.speculative.setToolTip(
            "Propose the next words and check them in one step: the words that followed the same words "
            "earlier in the chat, or a draft model's. Faster when the guesses are right (edits, lists, "
            "code). The reply does not change."
        )
        self.draft_max = _ispin(1, 64)
        self.draft_max.setObjectName("draftMaxSpin")
        self.draft_model = ElidedComboBox()
        self.draft_model.setObjectName("draftModelPicker")
        # As wide as the form allows, not as its longest item (a model's name can be long).
        self.draft_model.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.draft_model.setMinimumContentsLength(8)
        self.draft_model.setToolTip(
            "A smaller loaded model with the same vocabulary proposes the drafts; the reply is still "
            "this model's, word for word. Without one, drafts come from the conversation."
        )
        self._draft_choices: tuple[tuple[str, str], ...] = ()
        self._fill_draft_models("")
        drafts = QFormLayout()
        drafts.addRow("Draft up to (tokens)", self.draft_max)
        drafts.addRow("Draft model", self.draft_model)
        layout.addWidget(self.speculative)
        layout.addLayout(drafts)
        self.speculative.toggled.connect(self.draft_max.setEnabled)
        self.speculative.toggled.connect(self.draft_model.setEnabled)

        for spin in (self.temperature, self.top_p, self.min_p, self.repetition_penalty):
            spin.valueChanged.connect(self._on_changed)
        for ispin in (self.top_k, self.seed, self.max_tokens, self.thinking_budget, self.draft_max):
            ispin.valueChanged.connect(self._on_changed)
        for edit in (self.system_prompt, self.stop_strings, self.grammar):
            edit.textChanged.connect(self._on_changed)
        for box in (self.json_mode, self.thinking, self.speculative):
            box.toggled.connect(self._on_changed)
        self.draft_model.currentIndexChanged.connect(self._on_changed)

    def set_draft_models(self, choices: Sequence[tuple[str, str]]) -> None:
        """The loaded models a chat may pick as its draft model, as (id, label); the current
        pick stays (marked "not loaded" when it is not among them)."""
        self._draft_choices = tuple(choices)
        was_loading, self._loading = self._loading, True
        try:
            self._fill_draft_models(self.draft_model_id())
        finally:
            self._loading = was_loading

    def draft_model_id(self) -> str:
        return str(self.draft_model.currentData() or "")

    def _fill_draft_models(self, current: str) -> None:
        box = self.draft_model
        box.blockSignals(True)
        try:
            box.clear()
            box.addItem("None — draft from the conversation", "")
            for model_id, label in self._draft_choices:
                box.addItem(label, model_id)
            if current and box.findData(current) < 0:
                box.addItem(f"{current} (not loaded)", current)
            box.setCurrentIndex(max(0, box.findData(current)))
        finally:
            box.blockSignals(False)

    def load(self, system_prompt: str, s: SamplingSettings) -> None:
        """Show these values without announcing an edit."""
        self._loading = True
        try:
            self.system_prompt.setPlainText(system_prompt)
            self.temperature.setValue(s.temperature)
            self.top_k.setValue(s.top_k)
            self.top_p.setValue(s.top_p)
            self.min_p.setValue(s.min_p)
            self.repetition_penalty.setValue(s.repetition_penalty)
            self.seed.setValue(-1 if s.seed is None else s.seed)
            self.max_tokens.setValue(s.max_tokens)
            self.stop_strings.setPlainText("\n".join(s.stop_sequences))
            self.json_mode.setChecked(s.json_mode)
            self.grammar.setPlainText(s.grammar)
            self.thinking.setChecked(s.thinking)
            self.thinking_budget.setValue(s.thinking_budget_tokens)
            self.speculative.setChecked(s.speculative)
            self.draft_max.setValue(s.draft_max)
            self.draft_max.setEnabled(s.speculative)
            self._fill_draft_models(s.draft_model)
            self.draft_model.setEnabled(s.speculative)
        finally:
            self._loading = False

    def system_prompt_text(self) -> str:
        return self.system_prompt.toPlainText()

    def sampling(self) -> SamplingSettings:
        seed = self.seed.value()
        return SamplingSettings(
            temperature=self.temperature.value(),
            top_k=self.top_k.value(),
            top_p=self.top_p.value(),
            min_p=self.min_p.value(),
            repetition_penalty=self.repetition_penalty.value(),
            seed=None if seed < 0 else seed,
            max_tokens=self.max_tokens.value(),
            stop_sequences=tuple(x for x in self.stop_strings.toPlainText().splitlines() if x),
            grammar=self.grammar.toPlainText(),
            json_mode=self.json_mode.isChecked(),
            thinking=self.thinking.isChecked(),
            thinking_budget_tokens=self.thinking_budget.value(),
            speculative=self.speculative.isChecked(),
            draft_max=self.draft_max.value(),
            draft_model=self.draft_model_id(),
        )

    def _on_changed(self, *_args: object) -> None:
        if not self._loading:
            self.edited.emit()


def section(text: str) -> QLabel:
    label = QLabel(text)
    label.setObjectName("sectionLabel")
    return label


def _dspin(lo: float, hi: float, step: float, decimals: int) -> QDoubleSpinBox:
    spin = QDoubleSpinBox()
    spin.setRange(lo, hi)
    spin.setSingleStep(step)
    spin.setDecimals(decimals)
    return spin


def _ispin(lo: int, hi: int) -> QSpinBox:
    spin = QSpinBox()
    spin.setRange(lo, hi)
    return spin
