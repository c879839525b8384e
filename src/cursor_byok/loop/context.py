"""What the client told us about one run: rules, environment, extra tools and context.

A `TurnContext` arrives with `Start` and is kept in the conversation state, so every LLM call of
the turn builds the same system prompt and tool list (provider prefix caches), and a later turn
started by a bare `UserMessage` reuses it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from cursor_byok.llm.types import ToolDefinition

from .catalogue import DEFAULT_SWITCHES, Switches

DEFAULT_MAX_LLM_CALLS = 100
# Compaction starts when the next request would pass this share of the model's window
# (Cursor's own rule, cursor-native-tools.md §5).
DEFAULT_COMPACTION_THRESHOLD = 0.9
# The least room an answer may have: a request whose prompt leaves less is refused (window.py).
MIN_OUTPUT_RESERVE = 1024

# Modes in which the model should only look: the prompt says so; in ask mode the server also
# refuses the calls that would change the workspace (catalogue.REFUSED).
READ_ONLY_MODES: frozenset[str] = frozenset({"ask", "plan"})


class Environment(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """The user's machine, as reported by the client. Every field is optional."""

    os: str | None = None
    shell: str | None = None
    workspace_paths: tuple[str, ...] = ()
    cwd: str | None = None
    time_zone: str | None = None
    # Where the client writes background shells' output (RequestContextEnv.terminals_folder);
    # AwaitShell reads it there. Not part of the system prompt.
    terminals_folder: str | None = None


class DebugSession(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """Cursor's debug mode (RequestContext.debug_mode_config): where the IDE collects the
    runtime evidence the model's instrumentation sends, for one debugging session."""

    log_path: str = ""  # an NDJSON file in the workspace the IDE reads back
    server_endpoint: str = ""  # the IDE's local ingest URL (POST one JSON object per event)
    session_id: str = ""


class KeptPart(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """A context blob the client sent for this turn (`request_context_parts`), kept with the
    conversation: a later turn whose client cannot serve that kind of blob again (an error or
    an empty answer) reads this copy instead, also after a restart. Opaque to the loop."""

    kind: str  # "rules" | "skills" | "subagents" | "mcps"
    blob_id: bytes
    data: bytes


class McpRoute(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """Where a call of the MCP tool the model knows as `name` goes: the client's MCP server and
    the tool's own name there. Kept with the turn's context, so a call resumed after a restart
    reaches the same tool as the call the model made."""

    name: str  # the model-facing name (a key of the turn's tools)
    server: str  # the MCP server's identifier on the client
    tool: str  # the tool's name on that server
    definition: str = ""  # the client's own name for the tool, echoed back to it


class McpToolInfo(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """One tool of an MCP server, as GetMcpTools describes it to the model."""

    name: str  # the tool's own name on its server (CallMcpTool's toolName)
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=dict)  # JSON Schema
    # The client's file defining it (McpToolDescriptor.definition_path), read for a tool the
    # descriptor gives no description or schema (transport/runtime/mcp_definitions.py).
    definition_path: str = ""


class McpServerInfo(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """One MCP server the meta-tools reach (from the client's descriptors, completed by its
    flat tool definitions), in the order the prompt lists them."""

    identifier: str  # the server's identifier on the client (CallMcpTool's server)
    name: str = ""
    instructions: str = ""
    tools: tuple[McpToolInfo, ...] = ()


class ContextWindow(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """The token budget of the run's model, for the loop's compaction decisions (the formula
    is in window.py).

    - `tokens`: the model's configured context window.
    - `threshold`: compaction starts when the next request plus the answer reserve would pass
      `threshold x` the window.
    - `output_reserve`: room left for the answer (the model's max_output_tokens, or a reserve).
    - `summary_window`, `summary_output`: the window and the answer bound of the model that
      writes the summary (the same model, or the configured compaction_model); the summary
      request's input is trimmed from the oldest side to fit.
    - `provider_tokens`: the window the model's provider reported when it refused a request
      as too long (kept per model by the process, never written to the configuration); 0:
      none reported. The smaller of it and `tokens` is the window the decisions use.
    """

    tokens: int
    threshold: float = DEFAULT_COMPACTION_THRESHOLD
    output_reserve: int = 0
    summary_window: int = 0  # 0: the same as `tokens`
    summary_output: int = 4096
    provider_tokens: int = 0

    @property
    def size(self) -> int:
        """W: the configured window, or the provider's when that is smaller."""
        reported = self.provider_tokens
        return min(self.tokens, reported) if reported > 0 else self.tokens

    @property
    def reserve(self) -> int:
        """R: the room kept for the answer (at most a quarter of a window the provider
        reported smaller than the configured one)."""
        if 0 < self.provider_tokens < self.tokens:
            return min(self.output_reserve, self.provider_tokens // 4)
        return self.output_reserve

    @property
    def min_reserve(self) -> int:
        """M: the least room an answer may have before a request is refused."""
        return min(self.reserve, MIN_OUTPUT_RESERVE)

    @property
    def limit(self) -> int:
        """T: the share of the window past which a request is compacted first."""
        return int(self.threshold * self.size)

    @property
    def budget(self) -> int:
        """The most a request may hold before compaction starts (T - R)."""
        return self.limit - self.reserve


class SubagentModel(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """A model the client lists for Task (AgentRunRequest.selected_subagent_models) that this
    server serves: the client's name for it and our model id."""

    name: str
    model: str


class SubagentOverride(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """The client's pin for one subagent type (AgentRunRequest.subagent_model_overrides):
    a model (`model`, our id; `unserved` when we do not serve the name it gave), the parent's
    model (`inherit`), or the type switched off (`disabled`)."""

    subagent_type: str
    model: str = ""
    unserved: str = ""
    inherit: bool = False
    disabled: bool = False


class CustomAgent(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """A custom subagent the IDE sent (`.cursor/agents/<name>.md`, CustomSubagent): a Task
    type of its own (loop/custom_agents.py). `model` is as the file names it ("" or inherit:
    the parent's); `tools` the tool names it lists (none: every subagent tool)."""

    name: str
    description: str = ""
    prompt: str = ""
    model: str = ""
    tools: tuple[str, ...] = ()


class Subagents(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """What Task and a child run need to know (docs/subagents.md).

    - `models`, `overrides`: Task's model choices, as above.
    - `depth`: how deep this conversation is nested: 0 for a conversation the user started,
      1 for its child, and so on. Task is not offered at server.subagent_max_depth.
    - `subagent_type`: set on a child run (AgentRunRequest.subagent_type_name).
    - `parent_conversation_id`, `root_conversation_id`: the conversation that started this
      child, and the top-level one; empty for a top-level conversation.
    - `custom`: the custom subagents the IDE sent with this run's context: Task types of their
      own, and on a child run of one its prompt and tools (loop/custom_agents.py)."""

    models: tuple[SubagentModel, ...] = ()
    overrides: tuple[SubagentOverride, ...] = ()
    depth: int = 0
    subagent_type: str = ""
    parent_conversation_id: str = ""
    root_conversation_id: str = ""
    custom: tuple[CustomAgent, ...] = ()


class TurnContext(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """Per-run context.

    - `rules`: user and project rules, placed in the system prompt in the given order.
    - `skills`: the client's skills, one line each (where its file is, what it is for), in
      their own section of the system prompt after the rules.
    - `git`: a short repository summary (branch, status), placed in the system prompt.
    - `mcp_tools`: tools the client offers through MCP; listed after the native tools.
    - `mcp_routes`: for each MCP tool, where its calls go (server and tool name on the client).
    - `mcp_servers`: the MCP servers the meta-tools reach (when `switches.mcp_meta_tools` is
      true the model gets GetMcpTools, CallMcpTool, ... and these servers in the system prompt
      instead of one tool per MCP tool; `mcp_routes` then only resolve CallMcpTool's calls).
    - `supplements`: context the model should read as user content (selections, open files,
      attached documents). They are prepended, as text parts, to the user message that starts
      the turn; they are never written into older messages.
    - `custom_instructions`: free text appended to the system prompt.
    - `mode`: the mode whose tools are offered (catalogue.MODES: agent, ask, plan, debug,
      multitask, subagent); any other value offers agent's tools.
    - `switches`: the run's gate values (client flags, our config) that switch tools off.
    - `max_llm_calls`: at most this many LLM calls per turn; one more fails the turn.
    - `fallbacks`: the model ids to try, in order, when a call fails before its first output
      (the configuration of the run's model; transition.py decides when one is tried).
    - `kept_parts`: the context blobs this context was read from (KeptPart); never rendered.
    - `window`: the model's token budget; None: no automatic compaction.
    - `subagents`: Task's model choices and, on a child run, where it sits (Subagents).
    - `effort`, `efforts`: the reasoning effort the run's picker asked for, and those its
      model offers; a call uses the effort only when offered (loop/effort.py).
    - `debug`: the IDE's debug-mode session (log file, ingest endpoint), in the system prompt.
    - `images`: whether the run's model reads images (its `vision`); False: an image the
      user pastes reaches it as a note, and the user is told (loop/images.py).
    - `fallback_images`: whether each of `fallbacks` reads images (a fallback without vision
      is sent the history with notes in place of images, loop/image_notes.py).
    - `vision_model`: for a model without vision, the model id whose description of a pasted
      image stands in for the image ("": none, the note stands in; loop/images.py).
    """

    rules: tuple[str, ...] = ()
    environment: Environment = Environment()
    skills: tuple[str, ...] = ()
    git: str | None = None
    mcp_tools: tuple[ToolDefinition, ...] = ()
    mcp_routes: tuple[McpRoute, ...] = ()
    mcp_servers: tuple[McpServerInfo, ...] = ()
    supplements: tuple[str, ...] = ()
    custom_instructions: str | None = None
    mode: str = "agent"
    switches: Switches = DEFAULT_SWITCHES
    max_llm_calls: int = DEFAULT_MAX_LLM_CALLS
    fallbacks: tuple[str, ...] = ()
    kept_parts: tuple[KeptPart, ...] = ()
    window: ContextWindow | None = None
    subagents: Subagents = Subagents()
    images: bool | None = None
    vision_model: str = ""
    fallback_images: tuple[bool, ...] = ()
    debug: DebugSession | None = None
    effort: str = ""
    efforts: tuple[str, ...] = ()

    @property
    def read_only(self) -> bool:
        return self.mode in READ_ONLY_MODES

    @property
    def mcp_meta(self) -> bool:
        """Whether MCP is offered through the meta-tools instead of one tool per MCP tool."""
        return self.switches.mcp_meta_tools is True


DEFAULT_CONTEXT = TurnContext()
