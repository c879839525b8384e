"""The categories of the IDE's context meter and a request's characters per category: plain
values the loop's state and commands carry (meter.py computes them)."""

from __future__ import annotations

import enum

import msgspec

__all__ = ["CATEGORIES", "LABELS", "LABEL_BY_ID", "Category", "PromptChars"]


class Category(enum.StrEnum):
    """A category of the IDE's meter; the value is its id on the wire. Ids and labels are
    Cursor's own, as its checkpoints carry them (tests/fixtures/cursor: `token_details`)."""

    SYSTEM_PROMPT = "system_prompt"
    TOOLS = "tools"
    RULES = "rules"
    SKILLS = "skills"
    MCP = "mcp"
    SUBAGENTS = "subagents"
    SUMMARIZED_CONVERSATION = "summarized_conversation"
    CONVERSATION = "conversation"


# Every category in its order, as a tuple: iterating the enum itself and reading a member's
# `.value` are Python-level calls (three per category in 3.11), and the meter does both several
# times a turn (issue 28).
CATEGORIES: tuple[Category, ...] = tuple(Category)

LABELS: dict[Category, str] = {
    Category.SYSTEM_PROMPT: "System prompt",
    Category.TOOLS: "Tool definitions",
    Category.RULES: "Rules",
    Category.SKILLS: "Skills",
    Category.MCP: "MCP & dynamic tools",
    Category.SUBAGENTS: "Subagent definitions",
    Category.SUMMARIZED_CONVERSATION: "Summarized conversation",
    Category.CONVERSATION: "Conversation",
}
# The labels by category id: a plain `str` key hashes in C (an Enum member's __hash__ is Python).
LABEL_BY_ID: dict[str, str] = {str(c): label for c, label in LABELS.items()}


class PromptChars(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """The characters of one request, per category (field names are the category ids), and
    the images in its conversation (counted as IMAGE_TOKENS each, not by their bytes).
    `skills`: the system prompt's skills section; `subagents`: the Task tool's definition,
    which describes the subagent types the model can start."""

    system_prompt: int = 0
    tools: int = 0
    rules: int = 0
    skills: int = 0
    mcp: int = 0
    subagents: int = 0
    summarized_conversation: int = 0
    conversation: int = 0
    images: int = 0

    def of(self, category: Category) -> int:
        value: int = getattr(self, category)  # a StrEnum member is its field's name
        return value

    @property
    def total(self) -> int:
        return sum(getattr(self, c) for c in CATEGORIES)
