"""The reasoning effort of a model call: the one the IDE's thinking picker asked for
(`TurnContext.effort`, from requested_model's parameters), when the run's model offers it
(`TurnContext.efforts`, AvailableModels' picker values); else none, and the model's configured
effort applies.

A call's effort is part of its request bytes (Chat `reasoning_effort`, Responses
`reasoning.effort`, an Anthropic or Gemini thinking budget), so a change of effort mid-chat
starts a new request base: the next request is not a byte extension of the one before it
(docs/loop.md "Effort").
"""

from __future__ import annotations

from .context import TurnContext


def call_effort(context: TurnContext) -> str:
    """The effort of the run's own model's next call ("": its configured one)."""
    return context.effort if context.effort and context.effort in context.efforts else ""
