"""The vocabulary of usage limits the loop decides by (pydantic-ai's shape: limits are checked
inside the agent's loop, not around it).

`max_llm_calls` (the turn's own bound) is state the loop counts itself. A person token's limits
need the store and the clock, so the runtime checks them before each model call goes out and
answers with an admission input (`inputs.CallRefused`, or admitted): the loop decides what a
refusal means for the turn (admission.py).
"""

from __future__ import annotations

import enum


class Limit(enum.StrEnum):
    """Which of a person token's limits refused a model call (the client reads its name)."""

    REVOKED = "revoked"  # the token was revoked or is gone
    MODELS = "models"  # the model is outside the token's models
    BUDGET = "budget"  # the token's monthly budget is spent
    RATE = "rate"  # the token is over its model calls per minute


__all__ = ["Limit"]
