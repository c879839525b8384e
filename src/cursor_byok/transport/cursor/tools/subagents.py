"""Task and UpdateCurrentStep (reference §2.17, §3.5; docs/subagents.md).

Task asks the IDE to start a helper (exec `subagent_args` 28); the IDE opens the helper's own
run against this server and, when it ends, answers with `subagent_result` (28). The model's
`model` argument is checked here against the client's list and pins
(`Subagents.models` / `.overrides`, mapped to the models we serve when the run began): a model we
do not serve is an error result at once and nothing goes to the client, so the call never waits
on a child that could not run.

UpdateCurrentStep is answered by the server: its card (`communicate_update_tool_call` 48) is
what the IDE shows as the helper's progress.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ....loop.context import Subagents
from ....loop.tools import INHERIT, SUBAGENT_TYPES
from ..proto import agent_pb2
from . import args as a
from .machine import Finished, Handlers, Phase, Step, ToolMachine

__all__ = [
    "ModelChoice",
    "TaskMachine",
    "UpdateCurrentStepMachine",
    "choose_model",
    "report_text",
]


def report_text(final_message: str, agent_id: str) -> str:
    """What the parent's model reads of a helper that finished."""
    body = final_message.strip() or "The helper finished without a final message."
    return f"{body}\n\n(Helper agent id: {agent_id}. Pass it as resume to continue this helper.)"


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """The name the child run asks for (`SubagentArgs.model_id`), or why there is none."""

    name: str = ""
    error: str = ""


def _listed(subagents: Subagents) -> str:
    names = [INHERIT, *(m.name for m in subagents.models)]
    return ", ".join(names)


def choose_model(
    asked: str | None, subagent_type: str, subagents: Subagents, parent: str
) -> ModelChoice:
    """The helper's model. The user's pin for the type (an override) comes first: disabled is
    an error, a pinned model is used, inherit is the parent's model; then the model's own
    `model` argument (a listed name, matched ignoring case), where `inherit` or nothing is the
    parent's model (`parent`, our id of the run's model)."""
    for pin in subagents.overrides:
        if pin.subagent_type != subagent_type:
            continue
        if pin.disabled:
            return ModelChoice(
                error=f"Error: the editor has switched off {subagent_type} helpers; use "
                "another subagent_type."
            )
        if pin.unserved:
            return ModelChoice(
                error=f"Error: the editor pins {subagent_type} helpers to the model "
                f"{pin.unserved!r}, which this server does not serve; change the pin in the "
                "editor's settings or use another subagent_type."
            )
        if pin.model:
            return ModelChoice(name=pin.model)
        if pin.inherit:
            return ModelChoice(name=parent)
    if not asked or asked.casefold() == INHERIT:
        asked = _custom_model(subagent_type, subagents)
        if not asked:
            return ModelChoice(name=parent)
    for listed in subagents.models:
        if asked.casefold() in (listed.name.casefold(), listed.model.casefold()):
            return ModelChoice(name=listed.name)
    return ModelChoice(
        error=f"Error: this server does not serve the model {asked!r} for helpers. Choose one "
        f"of: {_listed(subagents)}."
    )


def _custom_model(subagent_type: str, subagents: Subagents) -> str:
    """The model a custom agent's file names, when it is one of the listed models (any other
    name, `inherit` or none: the parent's model) [U: the names Cursor's files use]."""
    agent = next((c for c in subagents.custom if c.name == subagent_type), None)
    if agent is None or not agent.model or agent.model.casefold() == INHERIT:
        return ""
    wanted = agent.model.casefold()
    listed = any(wanted in (m.name.casefold(), m.model.casefold()) for m in subagents.models)
    return agent.model if listed else ""


def subagent_types(subagents: Subagents) -> tuple[str, ...]:
    """Our helper types, then the user's own (custom agents)."""
    return (*SUBAGENT_TYPES, *(c.name for c in subagents.custom))


_MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif"}
_MIME[".webp"] = "image/webp"


def _mime(path: str) -> str:
    """The type a Task attachment's name says ("" when it says none we know)."""
    dot = path.rfind(".")
    return _MIME.get(path[dot:].lower(), "") if dot >= 0 else ""


def subagent_type_card(name: str) -> agent_pb2.SubagentType:
    """The card's SubagentType for one of our type names; a name without a variant of its own
    is `custom` with the name."""
    out = agent_pb2.SubagentType()
    match name:
        case "explore":
            out.explore.SetInParent()
        case "shell":
            out.shell.SetInParent()
        case "generalPurpose" | "":
            out.unspecified.SetInParent()
        case _:
            out.custom.name = name
    return out


class TaskMachine(ToolMachine):
    """exec subagent_args → subagent_result; the card is task_tool_call (19)."""

    CARD = "task_tool_call"
    # A helper's whole run is one call: it gets the long deadline (server.question_timeout_s).
    WAITS_ON_PERSON: ClassVar[bool] = True
    REQUIRED = ("description", "prompt")

    @property
    def subagent_type(self) -> str:
        return a.get_str(self.args, "subagent_type") or SUBAGENT_TYPES[0]

    @property
    def background(self) -> bool:
        return a.get_bool(self.args, "run_in_background") is True

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        args = tc.task_tool_call.args
        args.description = a.str_or_empty(self.args, "description")
        args.prompt = a.str_or_empty(self.args, "prompt")
        args.subagent_type.CopyFrom(subagent_type_card(self.subagent_type))
        model = a.get_str(self.args, "model")
        if model:
            args.model = model
        resume = a.get_str(self.args, "resume")
        if resume:
            args.resume = resume
        args.attachments.extend(self._attachments())
        return tc

    def _attachments(self) -> list[str]:
        raw = self.args.get("file_attachments")
        if not isinstance(raw, list):
            return []
        return [p for p in raw if isinstance(p, str) and p.strip()]

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.task_tool_call.result.error.error = text

    def _choice(self) -> ModelChoice:
        return choose_model(
            a.get_str(self.args, "model"),
            self.subagent_type,
            self.settings.subagents,
            self.settings.model,
        )

    def _argument_problem(self) -> str | None:
        problem = super()._argument_problem()
        if problem is not None:
            return problem
        types = subagent_types(self.settings.subagents)
        if self.subagent_type not in types:
            return (
                f"Error: there is no subagent_type {self.subagent_type!r}. Use one of: "
                f"{', '.join(types)}."
            )
        return self._choice().error or None

    def _first_exec(self) -> bytes:
        subagents = self.settings.subagents
        conversation = self.settings.conversation_id
        request = agent_pb2.SubagentArgs(
            tool_call_id=self.tool_call_id,
            subagent_type=self.subagent_type,
            model_id=self._choice().name,
            prompt=a.str_or_empty(self.args, "prompt"),
            run_in_background=self.background,
            parent_conversation_id=conversation,
            root_parent_conversation_id=subagents.root_conversation_id or conversation,
            environment=agent_pb2.SUBAGENT_ENVIRONMENT_LOCAL,
        )
        resume = a.get_str(self.args, "resume")
        if resume:
            request.resume_agent_id = resume
        for path in self._attachments():  # the IDE loads them for the helper [U]
            request.selected_context.selected_images.add(path=path, mime_type=_mime(path))
        return self._exec("subagent_args", request)

    def _on_result(self, result: agent_pb2.SubagentResult, now_ms: int) -> Step:
        match result.WhichOneof("result"):
            case "success":
                return self._on_success(result.success, now_ms)
            case "error":
                who = f" (agent id {result.error.agent_id})" if result.error.agent_id else ""
                error = result.error.error or "no reason given"
                return self._finish_error(f"Error: the helper{who} failed: {error}", now_ms)
            case _:
                return self._finish_error(
                    "Error: the client answered the Task call with an empty result.", now_ms
                )

    def _on_success(self, success: agent_pb2.SubagentSuccess, now_ms: int) -> Finished:
        tc = self._card()
        done = tc.task_tool_call.result.success
        done.agent_id = success.agent_id
        start = self.started_at_ms if self.started_at_ms is not None else now_ms
        done.duration_ms = max(0, now_ms - start)
        if success.HasField("transcript_path"):
            done.transcript_path = success.transcript_path
        backgrounded = success.HasField("background_reason") and success.background_reason != 0
        if backgrounded:
            done.is_background = True
            done.background_reason = success.background_reason
            text = (
                f"The helper runs in the background (agent id {success.agent_id}). You will be "
                "told when it finishes; go on with other work meanwhile."
            )
            return self._finish(text, tc, now_ms)
        return self._finish(report_text(success.final_message, success.agent_id), tc, now_ms)

    HANDLERS: ClassVar[Handlers] = {Phase.RUNNING: {"subagent_result": _on_result}}


class UpdateCurrentStepMachine(ToolMachine):
    """Answered at once by the server: the card carries the step (reference §2.17)."""

    CARD = "communicate_update_tool_call"
    HANDLERS: ClassVar[Handlers] = {}

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        args = tc.communicate_update_tool_call.args
        for key in ("current_step", "final_summary", "completed_subtitle"):
            value = a.get_str(self.args, key)
            if value:
                setattr(args, key, value)
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.communicate_update_tool_call.result.error.error = text

    def _answer_now(self, now_ms: int) -> Finished:
        tc = self._card()
        step = a.get_str(self.args, "current_step")
        final = a.get_str(self.args, "final_summary")
        if not step and not final:
            return self._finish_error(
                "Error: UpdateCurrentStep needs current_step, or final_summary at the end.",
                now_ms,
            )
        success = tc.communicate_update_tool_call.result.success
        if step:
            success.current_step = step
        text = "Shown to the user." if step else "Final summary shown to the user."
        return self._finish(text, tc, now_ms)
