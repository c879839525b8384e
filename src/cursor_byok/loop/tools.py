"""The native tool catalogue, as data.

Every tool runs on the user's machine through the Cursor client. `side_effects` says whether a
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


SHELL = ToolSpec(
    name="Shell",
    description=(
        "Run a command in the user's shell on their machine and return its exit code and "
        "output. Use it for builds, tests, git and other command-line work. The command runs "
        "non-interactively; avoid commands that wait for input or never exit. Ask before "
        "running anything destructive or irreversible."
    ),
    parameters=_object(
        {
            "command": _string("The command line to run."),
            "working_directory": _string(
                "Directory to run in; defaults to the workspace root. Absolute, or relative "
                "to the workspace root."
            ),
            "timeout_ms": {
                "type": "integer",
                "minimum": 1,
                "description": "Stop the command after this many milliseconds.",
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

# The three tools the IDE answers with its own UI (an interaction query, not an exec). They
# change nothing on the machine themselves, so read-only modes keep them. Names and parameters
# are Cursor's (reference §2.11-2.13); the descriptions are ours.
CREATE_PLAN = ToolSpec(
    name="CreatePlan",
    description=(
        "Hand the user a written plan for the task: the editor saves it as a plan document "
        "they can review and then build with one button. Use it in plan mode once you know "
        "what to do; the turn ends after it. Calling it again without a name revises the "
        "same plan."
    ),
    parameters={
        "type": "object",
        "properties": {
            "plan": _string("The plan in Markdown; its first line is an H1 title."),
            "overview": _string("One or two sentences on what the plan achieves."),
            "name": _string("A short name of three or four words; only on the first call."),
            "todos": {
                "type": "array",
                "description": "The steps of the plan, in order.",
                "items": _object(
                    {"id": _string("A short unique id."), "content": _string("The step.")},
                    ["id", "content"],
                ),
            },
        },
        "additionalProperties": False,
    },
    side_effects=False,
)

ASK_QUESTION = ToolSpec(
    name="AskQuestion",
    description=(
        "Ask the user one or more multiple-choice questions in a form inside the editor and "
        "wait for the answers. Use it when a decision is theirs to make and guessing would "
        "waste work. The user may also answer in their own words."
    ),
    parameters=_object(
        {
            "title": _string("A title for the form."),
            "questions": {
                "type": "array",
                "minItems": 1,
                "description": "The questions, shown in this order.",
                "items": _object(
                    {
                        "id": _string("A short unique id of the question."),
                        "prompt": _string("The question itself."),
                        "options": {
                            "type": "array",
                            "minItems": 2,
                            "description": "The choices offered.",
                            "items": _object(
                                {
                                    "id": _string("A short unique id of the choice."),
                                    "label": _string("The text the user sees."),
                                },
                                ["id", "label"],
                            ),
                        },
                        "allow_multiple": {
                            "type": "boolean",
                            "description": "Whether several choices may be picked.",
                        },
                    },
                    ["id", "prompt", "options"],
                ),
            },
        },
        ["questions"],
    ),
    side_effects=False,
)

SWITCH_MODE = ToolSpec(
    name="SwitchMode",
    description=(
        "Ask the user to move this conversation to another mode: 'plan' to think a larger "
        "change through before touching files, 'agent' to carry out work. The user approves "
        "or declines; once approved, the new mode's tools apply from your next step."
    ),
    parameters=_object(
        {
            "target_mode_id": {
                "type": "string",
                "enum": ["agent", "plan"],
                "description": "The mode to switch to.",
            },
            "explanation": _string("Why the switch helps, in one sentence for the user."),
        },
        ["target_mode_id"],
    ),
    side_effects=False,
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
    CREATE_PLAN,
    ASK_QUESTION,
    SWITCH_MODE,
)
NATIVE_BY_NAME: dict[str, ToolSpec] = {t.name: t for t in NATIVE_TOOLS}

# The modes that offer each query tool (reference §1); every other native tool is offered in
# every mode its side effects allow. Any mode we do not know counts as "agent". The catalogue
# of issue 14 point 1 replaces this with its per-mode table.
QUERY_TOOL_MODES: dict[str, frozenset[str]] = {
    "CreatePlan": frozenset({"plan"}),
    "AskQuestion": frozenset({"agent", "ask", "plan", "debug", "multitask"}),
    "SwitchMode": frozenset({"agent", "multitask"}),
}
KNOWN_MODES: frozenset[str] = frozenset({"agent", "ask", "plan", "debug", "multitask"})


def offered_in(tool_name: str, mode: str) -> bool:
    """Whether mode `mode` offers the native tool `tool_name` (before read-only filtering)."""
    modes = QUERY_TOOL_MODES.get(tool_name)
    if modes is None:
        return True
    return (mode if mode in KNOWN_MODES else "agent") in modes


NATIVE_TOOL_NAMES: tuple[str, ...] = tuple(t.name for t in NATIVE_TOOLS)
READ_ONLY_TOOL_NAMES: frozenset[str] = frozenset(t.name for t in NATIVE_TOOLS if not t.side_effects)


def side_effects(tool_name: str) -> bool:
    """Whether a call of `tool_name` can change the user's machine.

    Native tools answer from the catalogue; every MCP tool counts as having side effects, and so
    does any name we do not know (the safe answer).
    """
    spec = NATIVE_BY_NAME.get(tool_name)
    return True if spec is None else spec.side_effects
