"""The catalogue's tools that steer the work rather than touch the machine: the checklist
(TodoWrite), helpers (Task, UpdateCurrentStep) and the three the IDE answers with its own UI
(CreatePlan, AskQuestion, SwitchMode). None of them changes the user's files by itself; Task's
helper can, so Task alone counts as having side effects."""

from __future__ import annotations

from typing import Any

from .tool_spec import ToolSpec
from .tool_spec import object_schema as _object
from .tool_spec import string_schema as _string

__all__ = [
    "ASK_QUESTION",
    "CREATE_PLAN",
    "INHERIT",
    "SUBAGENT_TYPES",
    "SWITCH_MODE",
    "TASK",
    "TODO_WRITE",
    "UPDATE_CURRENT_STEP",
    "task_parameters",
]

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

# Task's subagent types: the reference's (CAP build) that a child run of ours can serve with
# the subagent tool set; each only changes the child's prompt (loop/prompt.py). The types that
# need Cursor's own services (ci-investigator, bugbot, security-review, best-of-n-runner) are
# not offered: a child of ours could not do what their names promise.
SUBAGENT_TYPES: tuple[str, ...] = ("generalPurpose", "explore", "shell")
# `model`: the parent's model, whatever the client lists.
INHERIT = "inherit"


def task_parameters(
    models: tuple[str, ...] = (),
    types: tuple[str, ...] = SUBAGENT_TYPES,
    custom: tuple[tuple[str, str], ...] = (),
) -> dict[str, Any]:
    """Task's arguments; `models` are the names the client listed that this server serves
    (AgentRunRequest.selected_subagent_models), in the client's order; `custom` the user's
    own helper types (name, description), after ours."""
    described = "".join(
        f" {name}: {' '.join(about.split())[:300] or 'a helper the user defined'}."
        for name, about in custom
    )
    kinds = [*types, *(name for name, _ in custom)]
    return _object(
        {
            "description": _string(
                "A short title for the task (three to five words), shown as the helper's name."
            ),
            "prompt": _string(
                "Everything the helper needs to do the task on its own: the goal, the files or "
                "places to look at, what to leave alone and what to report back. It sees none "
                "of this conversation."
            ),
            "subagent_type": {
                "type": "string",
                "enum": kinds,
                "description": (
                    "The kind of helper: generalPurpose for any multi-step work, explore to "
                    "search and read the code without changing it, shell for command-line work."
                    + (" The user's own helpers:" + described if custom else "")
                ),
            },
            "model": {
                "type": "string",
                "enum": [INHERIT, *models],
                "description": f"The model the helper runs on; {INHERIT} (the default) is yours.",
            },
            "resume": _string(
                "The agent id an earlier Task result gave, to continue that helper's "
                "conversation instead of starting a new one."
            ),
            "run_in_background": {
                "type": "boolean",
                "description": (
                    "true: return at once and go on working; you are told when the helper "
                    "finishes. Default false: wait for its result."
                ),
            },
            "file_attachments": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Paths of images in the workspace the helper should look at.",
            },
        },
        ["description", "prompt"],
    )


TASK = ToolSpec(
    name="Task",
    description=(
        "Hand a self-contained piece of work to a helper agent that runs with its own "
        "conversation and tools in the same workspace, and get its final report back as the "
        "result. Use it for broad searches or independent multi-step work that would fill "
        "this conversation with detail; give the helper a complete prompt, because it sees "
        "nothing else. The result ends with the helper's agent id: pass it as resume to "
        "continue that helper later."
    ),
    parameters=task_parameters(),
    side_effects=True,  # the helper can change the workspace; never started twice
)

UPDATE_CURRENT_STEP = ToolSpec(
    name="UpdateCurrentStep",
    description=(
        "Tell the user, who watches you from the conversation that started you, what you are "
        "doing now. Call it when you move to a new step; once, at the very end, give "
        "final_summary and completed_subtitle instead."
    ),
    parameters=_object(
        {
            "current_step": {
                "type": "string",
                "minLength": 1,
                "description": "The step you are on now, in at most six words.",
            },
            "final_summary": _string("At the end only: what you did, for the user."),
            "completed_subtitle": _string("At the end only: four to six words in the past tense."),
        },
        [],
    ),
    side_effects=False,  # a progress line: nothing on the user's machine changes
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
