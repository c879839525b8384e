"""The native tool catalogue, as data.

Every tool runs on the user's machine through the Cursor client, except the local ones
(`LOCAL_TOOL_NAMES`: TodoWrite), which the loop answers itself. `side_effects` says whether a
call can change anything there (files, processes): the loop uses it to decide whether a call
whose answer was lost may be sent again, and read-only modes offer only the tools without side
effects.
"""

from __future__ import annotations

from typing import Any

import msgspec

from cursor_byok.llm.types import ToolDefinition


class ToolSpec(msgspec.Struct, frozen=True):
    name: str
    description: str
    parameters: dict[str, Any]
    side_effects: bool

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name, description=self.description, parameters=self.parameters
        )


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


# Cursor's own default: a command still running after 30 s moves to the background.
DEFAULT_BLOCK_UNTIL_MS = 30_000
# AwaitShell's longest wait as Cursor's tool states it (the runtime's tool deadline is lower).
MAX_AWAIT_MS = 7_140_000

SHELL = ToolSpec(
    name="Shell",
    description=(
        "Run a command in the user's shell on their machine and return its exit code and "
        "output. Use it for builds, tests, git and other command-line work. The command runs "
        "non-interactively; avoid commands that wait for input. A command still running after "
        "block_until_ms keeps running in the background: the result then gives its shell id "
        "and the file its output goes to, and AwaitShell waits for it. Set block_until_ms to 0 "
        "for servers and watchers that never exit. Ask before running anything destructive or "
        "irreversible."
    ),
    parameters=_object(
        {
            "command": _string("The command line to run."),
            "working_directory": _string(
                "Directory to run in; defaults to the workspace root. Absolute, or relative "
                "to the workspace root."
            ),
            "block_until_ms": {
                "type": "integer",
                "minimum": 0,
                "description": (
                    "How long to wait for the command before leaving it running in the "
                    f"background, in milliseconds (default {DEFAULT_BLOCK_UNTIL_MS}; 0 starts "
                    "it in the background at once)."
                ),
            },
            "description": _string("A short label (five to ten words) shown with the command."),
            "notify_on_output": {
                "type": "object",
                "description": (
                    "For a command left in the background: ask to be told when its output "
                    "matches a pattern."
                ),
                "properties": {
                    "pattern": _string("Regular expression matched against the output."),
                    "reason": _string("A label of at most five words for the notification."),
                    "debounce_ms": {
                        "type": "integer",
                        "minimum": 5000,
                        "description": "Least time between two notifications (at least 5000).",
                    },
                },
                "required": ["pattern", "reason"],
                "additionalProperties": False,
            },
        },
        ["command"],
    ),
    side_effects=True,
)

READ = ToolSpec(
    name="Read",
    description=(
        "Read a text file from the user's machine. Returns the lines with their numbers. "
        "For large files pass offset and limit to read one part at a time."
    ),
    parameters=_object(
        {
            "path": _string("Path of the file, absolute or relative to the workspace root."),
            "offset": {
                "type": "integer",
                "minimum": 1,
                "description": "First line to return (1-based).",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": "Maximum number of lines to return.",
            },
        },
        ["path"],
    ),
    side_effects=False,
)

WRITE = ToolSpec(
    name="Write",
    description=(
        "Create a file, or replace the whole content of an existing one. Prefer StrReplace "
        "for changing part of an existing file. Parent directories are created as needed."
    ),
    parameters=_object(
        {
            "path": _string("Path of the file, absolute or relative to the workspace root."),
            "contents": _string("The complete new content of the file."),
        },
        ["path", "contents"],
    ),
    side_effects=True,
)

STR_REPLACE = ToolSpec(
    name="StrReplace",
    description=(
        "Edit a file by replacing an exact piece of text. old_string must match the file "
        "exactly, including whitespace, and must occur once unless replace_all is true. "
        "Read the file first so the text you quote is current."
    ),
    parameters=_object(
        {
            "path": _string("Path of the file, absolute or relative to the workspace root."),
            "old_string": _string("The exact text to replace."),
            "new_string": _string("The text to put in its place."),
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence instead of exactly one.",
            },
        },
        ["path", "old_string", "new_string"],
    ),
    side_effects=True,
)

DELETE = ToolSpec(
    name="Delete",
    description="Delete a file on the user's machine. This cannot be undone from here.",
    parameters=_object(
        {"path": _string("Path of the file, absolute or relative to the workspace root.")},
        ["path"],
    ),
    side_effects=True,
)

LS = ToolSpec(
    name="LS",
    description="List the entries of a directory on the user's machine.",
    parameters=_object(
        {"path": _string("Directory to list, absolute or relative to the workspace root.")},
        ["path"],
    ),
    side_effects=False,
)

GREP = ToolSpec(
    name="Grep",
    description=(
        "Search file contents with a regular expression (ripgrep syntax). Returns matching "
        "lines, the names of matching files, or match counts, depending on output_mode."
    ),
    parameters=_object(
        {
            "pattern": _string("The regular expression to search for."),
            "path": _string("File or directory to search; defaults to the workspace root."),
            "glob": _string("Only search files whose path matches this glob, e.g. '*.py'."),
            "output_mode": {
                "type": "string",
                "enum": ["content", "files_with_matches", "count"],
                "description": "What to return; defaults to content.",
            },
            "case_insensitive": {
                "type": "boolean",
                "description": "Ignore letter case when matching.",
            },
        },
        ["pattern"],
    ),
    side_effects=False,
)

GLOB = ToolSpec(
    name="Glob",
    description="Find files whose path matches a glob pattern, e.g. 'src/**/*.ts'.",
    parameters=_object(
        {
            "glob_pattern": _string("The glob pattern to match."),
            "target_directory": _string("Directory to search in; defaults to the workspace root."),
        },
        ["glob_pattern"],
    ),
    side_effects=False,
)

AWAIT_SHELL = ToolSpec(
    name="AwaitShell",
    description=(
        "Wait for a command that Shell left running in the background, then report whether it "
        "has finished, its exit code and the latest part of its output. Give the shell id from "
        "the Shell result. With pattern, stop waiting as soon as the output matches it; with "
        "block_until_ms 0, only check the current state."
    ),
    parameters=_object(
        {
            "shell_id": _string("The shell id the Shell result named."),
            "block_until_ms": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_AWAIT_MS,
                "description": (
                    f"Longest wait in milliseconds (default {DEFAULT_BLOCK_UNTIL_MS}; 0 checks "
                    "once)."
                ),
            },
            "pattern": _string(
                "Regular expression (multiline) over the output that ends the wait on a match."
            ),
            "waiting_for_subagent": {
                "type": "boolean",
                "description": "Set when the wait is for a subagent rather than a shell.",
            },
        },
        ["shell_id"],
    ),
    side_effects=False,
)


TODO_WRITE = ToolSpec(
    name="TodoWrite",
    description=(
        "Keep a visible checklist of the steps of a larger task; the user sees it as a panel. "
        "Use it for work of three or more distinct steps, not for a single quick change. "
        "Mark one item in_progress when you start on it and completed as soon as it is done. "
        "With merge true the items you send update the existing ones by id and new ids are "
        "added; with merge false they replace the whole list. Returns the full list."
    ),
    parameters=_object(
        {
            "todos": {
                "type": "array",
                "minItems": 2,
                "description": "The items to write.",
                "items": _object(
                    {
                        "id": _string("A short identifier, unique within the list."),
                        "content": _string("What the step is, in a few words."),
                        "status": {
                            "type": "string",
                            "enum": ["pending", "in_progress", "completed", "cancelled"],
                            "description": "Where the step stands.",
                        },
                    },
                    ["id", "content", "status"],
                ),
            },
            "merge": {
                "type": "boolean",
                "description": (
                    "true: update the listed items by id and keep the others; false: replace "
                    "the list with these items."
                ),
            },
        },
        ["todos", "merge"],
    ),
    side_effects=False,  # server state only: nothing on the user's machine changes
)

# Fixed order: this is the order the model sees (part of the cached request prefix).
NATIVE_TOOLS: tuple[ToolSpec, ...] = (
    SHELL,
    READ,
    WRITE,
    STR_REPLACE,
    DELETE,
    LS,
    GREP,
    GLOB,
    AWAIT_SHELL,
    TODO_WRITE,
)
# Tools the server answers itself (no exec goes to the client).
LOCAL_TOOL_NAMES: frozenset[str] = frozenset({TODO_WRITE.name})
NATIVE_BY_NAME: dict[str, ToolSpec] = {t.name: t for t in NATIVE_TOOLS}
NATIVE_TOOL_NAMES: tuple[str, ...] = tuple(t.name for t in NATIVE_TOOLS)
READ_ONLY_TOOL_NAMES: frozenset[str] = frozenset(t.name for t in NATIVE_TOOLS if not t.side_effects)


def side_effects(tool_name: str) -> bool:
    """Whether a call of `tool_name` can change the user's machine.

    Native tools answer from the catalogue; every MCP tool counts as having side effects, and so
    does any name we do not know (the safe answer).
    """
    spec = NATIVE_BY_NAME.get(tool_name)
    return True if spec is None else spec.side_effects
