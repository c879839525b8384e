"""Custom subagents the IDE sends (`.cursor/agents/*.md`: name, description, prompt, model,
tools): offered as Task types, and a child run of one gets its prompt and its tool list.

The tool names a definition lists are matched to ours ignoring case, with the usual other
names for them (`bash` → Shell, `edit` → StrReplace, …) [U: the names Cursor's own files use];
a list naming none of our tools, or no list, gives the helper every subagent tool.
UpdateCurrentStep is always kept: it is how a helper reports progress, not a workspace tool.
"""

from __future__ import annotations

from .context import CustomAgent, TurnContext

# Other names a definition may use for our tools (lowercase).
_ALIASES = {
    "bash": "Shell",
    "terminal": "Shell",
    "run_terminal_cmd": "Shell",
    "read_file": "Read",
    "edit": "StrReplace",
    "edit_file": "StrReplace",
    "search_replace": "StrReplace",
    "multiedit": "StrReplace",
    "write_file": "Write",
    "delete_file": "Delete",
    "list_dir": "LS",
    "search": "Grep",
    "grep_search": "Grep",
    "file_search": "Glob",
    "web_search": "WebSearch",
    "fetch": "WebFetch",
    "web_fetch": "WebFetch",
    "todo": "TodoWrite",
    "todowrite": "TodoWrite",
}
ALWAYS = ("UpdateCurrentStep",)


def agent_of(context: TurnContext) -> CustomAgent | None:
    """The custom agent a child run serves (its subagent_type names one), else None."""
    wanted = context.subagents.subagent_type
    if not wanted:
        return None
    return next((a for a in context.subagents.custom if a.name == wanted), None)


def allowed_tools(agent: CustomAgent, offered: tuple[str, ...]) -> tuple[str, ...]:
    """`offered` (in its order) narrowed to the agent's list; all of it when the list names
    none of them."""
    by_name = {name.casefold(): name for name in offered}
    chosen: set[str] = set()
    for raw in agent.tools:
        key = raw.strip().casefold()
        name = by_name.get(key) or _ALIASES.get(key)
        if name is not None and name in offered:
            chosen.add(name)
    if not chosen:
        return offered
    return tuple(n for n in offered if n in chosen or n in ALWAYS)
