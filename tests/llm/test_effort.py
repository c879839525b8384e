"""Issue 24 §5: the effort the IDE's picker chose reaches each API as its own field
(`with_effort` → each adapter's body): Chat `reasoning_effort`, Responses `reasoning.effort`,
an Anthropic thinking budget, a Gemini thinking budget (2.x) or level (3.x)."""

from __future__ import annotations

from cursor_byok.llm.anthropic.request import EFFORT_BUDGETS
from cursor_byok.llm.anthropic.request import build_body as anthropic_body
from cursor_byok.llm.gemini.request import EFFORT_TO_BUDGET, EFFORT_TO_LEVEL
from cursor_byok.llm.gemini.request import build_body as gemini_body
from cursor_byok.llm.openai_chat.request import ChatCompat
from cursor_byok.llm.openai_chat.request import build_body as chat_body
from cursor_byok.llm.openai_responses.request import build_body as responses_body
from cursor_byok.llm.settings import ModelSettings, with_effort
from cursor_byok.llm.types import RequestMessages, UserMessage

REQUEST = RequestMessages(system_prompt="s", messages=(UserMessage.of_text("hi"),))
# A configured model: medium effort and a fixed budget, which the picker's choice overrides.
CONFIGURED = ModelSettings(
    model="m", reasoning=True, reasoning_effort="medium", reasoning_budget=2048
)


def test_chat_and_responses_take_the_effort_by_name() -> None:
    high = with_effort(CONFIGURED, "high")
    assert chat_body(REQUEST, high, "p", ChatCompat())["reasoning_effort"] == "high"
    assert responses_body(REQUEST, high, "p")["reasoning"]["effort"] == "high"
    assert chat_body(REQUEST, CONFIGURED, "p", ChatCompat())["reasoning_effort"] == "medium"


def test_anthropic_takes_the_efforts_budget_not_the_configured_one() -> None:
    body = anthropic_body(REQUEST, with_effort(CONFIGURED, "high"), REQUEST.messages)
    assert body["thinking"]["budget_tokens"] == EFFORT_BUDGETS["high"] != 2048
    assert (
        anthropic_body(REQUEST, CONFIGURED, REQUEST.messages)["thinking"]["budget_tokens"] == 2048
    )
    off = anthropic_body(REQUEST, with_effort(CONFIGURED, "none"), REQUEST.messages)
    assert "thinking" not in off


def test_gemini_takes_a_budget_on_2x_and_a_level_on_3x() -> None:
    two = with_effort(ModelSettings(model="gemini-2.5-pro", reasoning=True), "low")
    config = gemini_body(REQUEST, two, "p")["generationConfig"]["thinkingConfig"]
    assert config["thinkingBudget"] == EFFORT_TO_BUDGET["low"]
    three = with_effort(ModelSettings(model="gemini-3-pro", reasoning=True), "low")
    config = gemini_body(REQUEST, three, "p")["generationConfig"]["thinkingConfig"]
    assert config["thinkingLevel"] == EFFORT_TO_LEVEL["low"]
