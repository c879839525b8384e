"""Deterministic identifiers, derived only from values already in the state.

Nothing here reads a clock or a random source: replaying the same inputs from the same state gives
the same ids, so the store can deduplicate LLM calls and client operations by id.

    turn_id       "{conversation_id}:{turn}"
    call_id       "{turn_id}:llm{n}"                 n = 1, 2, ... within the turn
    fallback      "{call_id}:fb{k}"                  the k-th fallback model for that call
    summary call  "{turn_id}:summary{n}"             counted with the turn's model calls
    vision call   "{turn_id}:vision{n}"              an image described, counted the same
    operation_id  "{call_id}:{tool_call_id}"         the LLM call whose answer asked for the tool
    commit_id     "{conversation_id}@{commit}"       commit = number of committed state changes
"""

from __future__ import annotations


def turn_id(conversation_id: str, turn: int) -> str:
    return f"{conversation_id}:{turn}"


def call_id(turn_id: str, n: int) -> str:
    return f"{turn_id}:llm{n}"


def fallback_call_id(call_id: str, k: int) -> str:
    """The call that repeats call `call_id`'s step on the k-th fallback model (k = 1, 2, ...)."""
    return f"{call_id}:fb{k}"


def fallback_of(call_id: str) -> tuple[str, int] | None:
    """For a fallback call's id, the call it stands in for and k; None for any other id."""
    base, sep, tail = call_id.rpartition(":fb")
    if not sep or not tail.isdigit() or tail.startswith("0"):
        return None
    return base, int(tail)


def summary_call_id(turn_id: str, n: int) -> str:
    return f"{turn_id}:summary{n}"


def vision_call_id(turn_id: str, n: int) -> str:
    return f"{turn_id}:vision{n}"


def operation_id(call_id: str, tool_call_id: str) -> str:
    # The LLM call is part of the id (not only the turn): some models reuse tool call ids such
    # as "call_0" in every response, and two operations must never share an id.
    return f"{call_id}:{tool_call_id}"


def commit_id(conversation_id: str, commit: int) -> str:
    return f"{conversation_id}@{commit}"
