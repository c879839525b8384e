"""The native tool catalogue, as data.

Every tool runs on the user's machine through the Cursor client, except the local ones
(`LOCAL_TOOL_NAMES`: TodoWrite), which the loop answers itself. `side_effects` says whether a
call can change anything there (files, processes): the loop uses it to decide whether a call
whose answer was lost may be sent again, and read-only modes offer only the tools without side
effects.

The tools that work on the machine (shell, files, search, lints, notebooks) are defined here;
tools_agent.py holds the ones that steer the work (todos, helpers, plans, questions, modes) and
tools_web.py the web and MCP meta-tools. `NATIVE_TOOLS` lists them all, in the order the model
sees.
"""

from __future__ import annotations

from typing import Any

from .tool_spec import ToolSpec as ToolSpec
from .tool_spec import object_schema as _object
from .tool_spec import string_schema as _string
from .tools_agent import (
    ASK_QUESTION,
    CREATE_PLAN,
    SWITCH_MODE,
    TODO_WRITE,
    UPDATE_CURRENT_STEP,
)
from .tools_agent import INHERIT as INHERIT
from .tools_agent import SUBAGENT_TYPES as SUBAGENT_TYPES
from .tools_agent import TASK as TASK
from .tools_agent import task_parameters as task_parameters
from .tools_web import (
    CALL_MCP_TOOL,
    FETCH_MCP_RESOURCE,
    GENERATE_IMAGE,
    GET_MCP_TOOLS,
    LIST_MCP_RESOURCES,
    WEB_FETCH,
    WEB_SEARCH,
)

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
            "request_smart_mode_approval": {
                "type": "boolean",
                "description": (
                    "Set when retrying a command that Auto-review blocked, to ask the user to "
                    "approve it; give the block reason in smart_mode_block_reason."
                ),
            },
            "smart_mode_block_reason": _string(
                "The reason Auto-review gave for blocking (required with "
                "request_smart_mode_approval)."
            ),
        },
        ["command"],
    ),
    side_effects=True,
)

READ = ToolSpec(
    name="Read",
    description=(
        "Read a file from the user's machine. A text file comes back as its lines with their "
        "numbers; for large files pass offset and limit to read one part at a time. An image "
        "(PNG, JPEG, GIF, WebP) is shown to you as the image when you can view images, and "
        "otherwise described by its type, size and dimensions."
    ),
    parameters=_object(
        {
            "path": _string("Path of the file, absolute or relative to the workspace root."),
            "offset": {
                "type": "integer",
                "description": (
                    "First line to return (1-based); a negative number counts from the end "
                    "(-20: the last twenty lines)."
                ),
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


def _count(description: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": 0, "description": description}


# Names and parameters as Cursor's (users' rules name them); the descriptions are ours.
GREP = ToolSpec(
    name="Grep",
    description=(
        "Search file contents with a regular expression (ripgrep syntax) on the user's "
        "machine. Returns matching lines with their numbers, the names of matching files, or "
        "match counts per file, depending on output_mode. Use glob or type to limit the files, "
        "and head_limit with offset to page through long answers."
    ),
    parameters=_object(
        {
            "pattern": _string("The regular expression to search for."),
            "path": _string("File or directory to search; defaults to the workspace root."),
            "glob": _string("Only search files whose path matches this glob, e.g. '*.py'."),
            "type": _string("Only search files of this ripgrep type, e.g. 'py' or 'rust'."),
            "output_mode": {
                "type": "string",
                "enum": ["content", "files_with_matches", "count"],
                "description": (
                    "content: matching lines; files_with_matches: file names; count: matches "
                    "per file. Defaults to content."
                ),
            },
            "-A": _count("Lines of context after each match (content mode)."),
            "-B": _count("Lines of context before each match (content mode)."),
            "-C": _count("Lines of context before and after each match (content mode)."),
            "-i": {"type": "boolean", "description": "Ignore letter case when matching."},
            "head_limit": _count(
                "Return at most this many entries: matching lines in content mode, files in "
                "the other modes."
            ),
            "offset": _count("Skip this many entries first; with head_limit, pages on."),
            "multiline": {
                "type": "boolean",
                "description": "Let the pattern span lines ('.' also matches newlines).",
            },
        },
        ["pattern"],
    ),
    side_effects=False,
)

GLOB = ToolSpec(
    name="Glob",
    description=(
        "Find files whose path matches a glob pattern. A pattern that does not start with "
        "'**/' is searched for at any depth ('*.ts' finds every TypeScript file). Returns one "
        "path per line."
    ),
    parameters=_object(
        {
            "glob_pattern": _string("The glob pattern to match, e.g. 'src/**/*.ts'."),
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
        "block_until_ms 0, only check the current state. Without a shell id it only waits "
        "block_until_ms."
    ),
    parameters=_object(
        {
            "shell_id": _string(
                "The shell id the Shell result named (required when block_until_ms is 0)."
            ),
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
        [],
    ),
    side_effects=False,
)


WRITE_SHELL_STDIN = ToolSpec(
    name="WriteShellStdin",
    description=(
        "Type characters into the standard input of a command that Shell left running in the "
        "background (one waiting for an answer, a REPL). Give the shell id from the Shell "
        "result; include a newline to press Enter. Then use AwaitShell to read what it did."
    ),
    parameters=_object(
        {
            "shell_id": _string("The shell id the Shell result named."),
            "chars": _string("The characters to write (\\n for Enter, \\u0003 for Ctrl-C)."),
        },
        ["shell_id", "chars"],
    ),
    side_effects=True,
)

READ_LINTS = ToolSpec(
    name="ReadLints",
    description=(
        "Get the problems the editor reports for files (linter warnings, type and compile "
        "errors), each with its line, column and severity. Check the files you edited before "
        "you finish; leave paths out for the whole workspace."
    ),
    parameters=_object(
        {
            "paths": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Files or directories to check, absolute or workspace-relative.",
            }
        },
        [],
    ),
    side_effects=False,
)


# The cell languages Cursor's EditNotebook names.
CELL_LANGUAGES = (
    "python",
    "markdown",
    "javascript",
    "typescript",
    "r",
    "sql",
    "shell",
    "raw",
    "other",
)

EDIT_NOTEBOOK = ToolSpec(
    name="EditNotebook",
    description=(
        "Edit one cell of a Jupyter notebook (.ipynb), or insert a new cell. To edit, give the "
        "cell's index and the exact text in it to replace (it must occur once in that cell); "
        "to insert, set is_new_cell and give the new cell's text, which goes in at cell_idx. "
        "Inserting cell 0 of a notebook that does not exist creates it. Outputs and metadata "
        "are kept."
    ),
    parameters=_object(
        {
            "target_notebook": _string(
                "Path of the notebook, absolute or relative to the workspace root."
            ),
            "cell_idx": {
                "type": "number",
                "description": "0-based index of the cell to edit, or where the new cell goes.",
            },
            "is_new_cell": {
                "type": "boolean",
                "description": "true: insert a new cell at cell_idx; false: edit that cell.",
            },
            "cell_language": {
                "type": "string",
                "enum": list(CELL_LANGUAGES),
                "description": "The cell's language; markdown and raw make those cell kinds.",
            },
            "old_string": _string(
                "The exact text in the cell to replace; empty when inserting a new cell."
            ),
            "new_string": _string("The replacement text, or the whole text of a new cell."),
        },
        ["target_notebook", "cell_idx", "is_new_cell", "cell_language", "old_string", "new_string"],
    ),
    side_effects=True,
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
    WRITE_SHELL_STDIN,
    TODO_WRITE,
    READ_LINTS,
    EDIT_NOTEBOOK,
    CREATE_PLAN,
    ASK_QUESTION,
    SWITCH_MODE,
    TASK,
    UPDATE_CURRENT_STEP,
    WEB_SEARCH,
    WEB_FETCH,
    GENERATE_IMAGE,
    GET_MCP_TOOLS,
    CALL_MCP_TOOL,
    FETCH_MCP_RESOURCE,
    LIST_MCP_RESOURCES,
)
# Tools the server answers itself (no exec goes to the client).
LOCAL_TOOL_NAMES: frozenset[str] = frozenset({TODO_WRITE.name})

NATIVE_BY_NAME: dict[str, ToolSpec] = {t.name: t for t in NATIVE_TOOLS}

NATIVE_TOOL_NAMES: tuple[str, ...] = tuple(t.name for t in NATIVE_TOOLS)


def side_effects(tool_name: str) -> bool:
    """Whether a call of `tool_name` can change the user's machine.

    Native tools answer from the catalogue; every MCP tool counts as having side effects, and so
    does any name we do not know (the safe answer).
    """
    spec = NATIVE_BY_NAME.get(tool_name)
    return True if spec is None else spec.side_effects
