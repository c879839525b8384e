"""What the client told us about one run: rules, environment, extra tools and context.

A `TurnContext` arrives with `Start` and is kept in the conversation state, so every LLM call of
the turn builds the same system prompt and tool list (provider prefix caches), and a later turn
started by a bare `UserMessage` reuses it.
"""

from __future__ import annotations

import msgspec

from cursor_byok.llm.types import ToolDefinition

DEFAULT_MAX_LLM_CALLS = 100

# Modes in which the model may only look, never change anything: side-effect tools are withheld.
READ_ONLY_MODES: frozenset[str] = frozenset({"ask", "plan"})


class Environment(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """The user's machine, as reported by the client. Every field is optional."""

    os: str | None = None
    shell: str | None = None
    workspace_paths: tuple[str, ...] = ()
    cwd: str | None = None
    time_zone: str | None = None


class McpRoute(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """Where a call of the MCP tool the model knows as `name` goes: the client's MCP server and
    the tool's own name there. Kept with the turn's context, so a call resumed after a restart
    reaches the same tool as the call the model made."""

    name: str  # the model-facing name (a key of the turn's tools)
    server: str  # the MCP server's identifier on the client
    tool: str  # the tool's name on that server
    definition: str = ""  # the client's own name for the tool, echoed back to it


class TurnContext(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """Per-run context.

    - `rules`: user and project rules, placed in the system prompt in the given order.
    - `git`: a short repository summary (branch, status), placed in the system prompt.
    - `mcp_tools`: tools the client offers through MCP; listed after the native tools.
    - `mcp_routes`: for each MCP tool, where its calls go (server and tool name on the client).
    - `supplements`: context the model should read as user content (selections, open files,
      attached documents). They are prepended, as text parts, to the user message that starts
      the turn; they are never written into older messages.
    - `custom_instructions`: free text appended to the system prompt.
    - `mode`: "agent" (all tools), "ask" or "plan" (read-only tools only, see READ_ONLY_MODES).
      Any other value is treated as "agent".
    - `max_llm_calls`: at most this many LLM calls per turn; one more fails the turn.
    - `read_lints`: whether ReadLints is offered; false only when the client's request said
      `read_lints_enabled = false` (a client that says nothing gets it, and can answer it with
      an empty list).
    """

    rules: tuple[str, ...] = ()
    environment: Environment = Environment()
    git: str | None = None
    mcp_tools: tuple[ToolDefinition, ...] = ()
    mcp_routes: tuple[McpRoute, ...] = ()
    supplements: tuple[str, ...] = ()
    custom_instructions: str | None = None
    mode: str = "agent"
    max_llm_calls: int = DEFAULT_MAX_LLM_CALLS
    read_lints: bool = True

    @property
    def read_only(self) -> bool:
        return self.mode in READ_ONLY_MODES


DEFAULT_CONTEXT = TurnContext()
