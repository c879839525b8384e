"""The tools the IDE answers with its own UI: CreatePlan, AskQuestion, SwitchMode.

Their calls go out as an `interaction_query` (reference §2.11-2.13), not as an exec, and come
back as the `interaction_response` with the same id. A `QueryMachine` is still a `ToolMachine`
(same cards, same early errors, same caller), whose "exec id" is the query's id: the link
allocates it from the interaction ids and routes the response to `answer`.

For these three, whatever the client answers ends the call: the expected variant gives the
tool's result, any other variant (or none) an error result the model reads. A family whose
approval only lets the work begin (WebFetch, GenerateImage: web.py) goes on from `_on_answer`
with an exec (its id from the exec ids) or a server job. A client that never answers is
bounded by the runtime's deadline like any tool call (the question deadline when the answer
waits on a person).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ....loop.inputs import ModeSwitched, PlanCreated
from ....loop.todos import plan_todos
from ..proto import agent_pb2
from . import args as a
from .machine import Finished, Handlers, Ignored, Phase, Step, ToolMachine

__all__ = ["AskQuestionMachine", "CreatePlanMachine", "QueryMachine", "SwitchModeMachine"]

# The modes SwitchMode may ask for (the values Cursor's own tool text allows) [S].
SWITCHABLE_MODES = ("agent", "plan")


class QueryMachine(ToolMachine):
    QUERY_FIELD: ClassVar[str]  # the InteractionQuery oneof field this family asks with
    RESPONSE_FIELD: ClassVar[str]  # the InteractionResponse oneof field it expects back
    HANDLERS: ClassVar[Handlers] = {}  # no exec replies: everything comes through `answer`

    def _query(self) -> Any:
        """The query message (CreatePlanRequestQuery, ...)."""
        raise NotImplementedError

    def _on_answer(self, response: Any, now_ms: int) -> Step:
        """The expected response message (CreatePlanRequestResponse, ...). Most families end
        the call here; an approval may go on with an exec or a server job (web.py,
        web_search.py)."""
        raise NotImplementedError

    def _first_exec(self) -> bytes:
        alloc = self._alloc_query or self._alloc
        if alloc is None:
            raise RuntimeError(f"{self!r} sends a query before start()")
        query_id = alloc()
        self._exec_ids.add(query_id)
        iq = agent_pb2.InteractionQuery(id=query_id)
        getattr(iq, self.QUERY_FIELD).CopyFrom(self._query())
        return agent_pb2.AgentServerMessage(interaction_query=iq).SerializeToString()

    def answer(self, response: agent_pb2.InteractionResponse, now_ms: int) -> Step:
        """The client's interaction_response to this call's query."""
        if self.phase is Phase.NEW:
            raise RuntimeError(f"answer() called on {self!r} before start()")
        if self.phase is not Phase.RUNNING:
            return Ignored(f"the {self.tool_call.name} call no longer waits on its query")
        if response.id not in self._exec_ids:
            return Ignored(f"interaction response {response.id} is not waited on")
        kind = response.WhichOneof("result")
        if kind != self.RESPONSE_FIELD:
            what = f"a {kind}" if kind is not None else "an empty (or unknown) response"
            return self._finish_error(
                f"Error: the client answered the {self.tool_call.name} request with {what} "
                "instead of its answer; the call did not happen.",
                now_ms,
            )
        return self._on_answer(getattr(response, kind), now_ms)

    def abort(self) -> tuple[bytes, ...]:
        """A query has no abort message: the IDE's form stays until the user closes it, and a
        late answer is ignored (nothing waits on its id any more). Once the query was answered
        and an exec is out (WebFetch's fetch) or a server job runs (WebSearch), the call is
        aborted as any call is (the job's outcome is then ignored)."""
        if self.phase is not Phase.RUNNING:
            return super().abort()
        self._exec_ids.clear()
        self._phase = Phase.ABORTED
        return ()


def _todo_items(value: Any) -> list[agent_pb2.TodoItem]:
    items: list[agent_pb2.TodoItem] = []
    if not isinstance(value, list):
        return items
    for raw in value:
        if isinstance(raw, Mapping):
            items.append(
                agent_pb2.TodoItem(
                    id=a.str_or_empty(raw, "id"),
                    content=a.str_or_empty(raw, "content"),
                    status=agent_pb2.TODO_STATUS_PENDING,
                )
            )
    return items


class CreatePlanMachine(QueryMachine):
    CARD = "create_plan_tool_call"
    QUERY_FIELD = "create_plan_request_query"
    RESPONSE_FIELD = "create_plan_request_response"
    REQUIRED = ("plan",)

    def _plan_args(self) -> agent_pb2.CreatePlanArgs:
        return agent_pb2.CreatePlanArgs(
            plan=a.str_or_empty(self.args, "plan"),
            todos=_todo_items(self.args.get("todos")),
            overview=a.str_or_empty(self.args, "overview"),
            name=a.str_or_empty(self.args, "name"),
        )

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        tc.create_plan_tool_call.args.CopyFrom(self._plan_args())
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.create_plan_tool_call.result.error.error = text

    def _query(self) -> agent_pb2.CreatePlanRequestQuery:
        return agent_pb2.CreatePlanRequestQuery(
            args=self._plan_args(), tool_call_id=self.tool_call_id
        )

    def _on_answer(self, response: agent_pb2.CreatePlanRequestResponse, now_ms: int) -> Finished:
        result = response.result
        if result.WhichOneof("result") != "success":
            error = result.error.error if result.HasField("error") else "no reason given"
            return self._finish_error(
                f"Error: the editor could not save the plan: {error or 'no reason given'}",
                now_ms,
            )
        uri = result.plan_uri
        tc = self._card()
        tc.create_plan_tool_call.result.CopyFrom(result)
        where = f" as {uri}" if uri else ""
        text = (
            f"The plan was saved{where}. The user reviews it now and starts the work with "
            "Build; this turn ends here."
        )
        effect = PlanCreated(
            plan=a.str_or_empty(self.args, "plan"),
            uri=uri,
            name=a.str_or_empty(self.args, "name"),
            overview=a.str_or_empty(self.args, "overview"),
            todos=plan_todos(self.args.get("todos")),
        )
        return self._finish(text, tc, now_ms, effect=effect)


def ask_question_args(args: Mapping[str, Any]) -> agent_pb2.AskQuestionArgs:
    """The model's AskQuestion arguments as the wire's AskQuestionArgs."""
    out = agent_pb2.AskQuestionArgs(title=a.str_or_empty(args, "title"))
    questions = args.get("questions")
    for raw in questions if isinstance(questions, list) else ():
        if not isinstance(raw, Mapping):
            continue
        q = out.questions.add(
            id=a.str_or_empty(raw, "id"),
            prompt=a.str_or_empty(raw, "prompt"),
            allow_multiple=a.get_bool(raw, "allow_multiple") or False,
        )
        options = raw.get("options")
        for option in options if isinstance(options, list) else ():
            if isinstance(option, Mapping):
                q.options.add(
                    id=a.str_or_empty(option, "id"), label=a.str_or_empty(option, "label")
                )
    return out


def answers_text(args: agent_pb2.AskQuestionArgs, success: agent_pb2.AskQuestionSuccess) -> str:
    """The user's answers as the model reads them: each question's prompt with the labels of
    the options picked (their ids in brackets) and any words of the user's own. Questions
    left without an answer say so."""
    by_id = {q.id: q for q in args.questions}
    lines = ["The user answered:"]
    answered: set[str] = set()
    for answer in success.answers:
        answered.add(answer.question_id)
        question = by_id.get(answer.question_id)
        prompt = question.prompt if question is not None and question.prompt else answer.question_id
        labels = {o.id: o.label for o in question.options} if question is not None else {}
        picked = [f"{labels[o]} [{o}]" if labels.get(o) else o for o in answer.selected_option_ids]
        parts = []
        if picked:
            parts.append(", ".join(picked))
        if answer.freeform_text:
            parts.append(f'in their own words: "{answer.freeform_text}"')
        lines.append(f"- {prompt}: {'; '.join(parts) if parts else '(no choice)'}")
    for question in args.questions:
        if question.id not in answered:
            lines.append(f"- {question.prompt or question.id}: (not answered)")
    return "\n".join(lines)


ASYNC_TEXT = (
    "The question form is open for the user; their answers will arrive later as a new "
    "message. Go on with what does not depend on them, or end your turn."
)


class AskQuestionMachine(QueryMachine):
    CARD = "ask_question_tool_call"
    QUERY_FIELD = "ask_question_interaction_query"
    RESPONSE_FIELD = "ask_question_interaction_response"
    WAITS_ON_PERSON = True

    def _argument_problem(self) -> str | None:
        questions = self.args.get("questions")
        if not isinstance(questions, list) or not questions:
            return (
                "Error: the AskQuestion call needs a non-empty questions array, each with an "
                "id, a prompt and at least two options. Call it again."
            )
        return None

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        tc.ask_question_tool_call.args.CopyFrom(ask_question_args(self.args))
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.ask_question_tool_call.result.error.error_message = text

    def _query(self) -> agent_pb2.AskQuestionInteractionQuery:
        return agent_pb2.AskQuestionInteractionQuery(
            args=ask_question_args(self.args), tool_call_id=self.tool_call_id
        )

    def _on_answer(
        self, response: agent_pb2.AskQuestionInteractionResponse, now_ms: int
    ) -> Finished:
        result = response.result
        tc = self._card()
        tc.ask_question_tool_call.result.CopyFrom(result)
        match result.WhichOneof("result"):
            case "success":
                text = answers_text(tc.ask_question_tool_call.args, result.success)
                return self._finish(text, tc, now_ms)
            case "async":
                return self._finish(ASYNC_TEXT, tc, now_ms)
            case "rejected":
                reason = result.rejected.reason or "no reason given"
                return self._finish(
                    f"The user declined to answer the question(s): {reason}",
                    tc,
                    now_ms,
                    is_error=True,
                )
            case "error":
                error = result.error.error_message or "no reason given"
                return self._finish(
                    f"Error: the question form failed: {error}", tc, now_ms, is_error=True
                )
            case _:
                return self._finish_error(
                    "Error: the client answered the AskQuestion request without a result; "
                    "the user's answers are unknown.",
                    now_ms,
                )


class SwitchModeMachine(QueryMachine):
    CARD = "switch_mode_tool_call"
    QUERY_FIELD = "switch_mode_request_query"
    RESPONSE_FIELD = "switch_mode_request_response"
    REQUIRED = ("target_mode_id",)
    WAITS_ON_PERSON = True

    @property
    def target(self) -> str:
        return a.str_or_empty(self.args, "target_mode_id").strip().lower()

    def _argument_problem(self) -> str | None:
        problem = super()._argument_problem()
        if problem is not None:
            return problem
        if self.target not in SWITCHABLE_MODES:
            return (
                f"Error: SwitchMode can switch to {' or '.join(SWITCHABLE_MODES)}, not "
                f"{self.target!r}."
            )
        if self.target == self.settings.mode:
            return f"Error: the conversation is already in {self.target} mode."
        return None

    def _switch_args(self) -> agent_pb2.SwitchModeArgs:
        out = agent_pb2.SwitchModeArgs(target_mode_id=self.target, tool_call_id=self.tool_call_id)
        explanation = a.get_str(self.args, "explanation")
        if explanation is not None:
            out.explanation = explanation
        return out

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        tc.switch_mode_tool_call.args.CopyFrom(self._switch_args())
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.switch_mode_tool_call.result.error.error = text

    def _query(self) -> agent_pb2.SwitchModeRequestQuery:
        return agent_pb2.SwitchModeRequestQuery(args=self._switch_args())

    def _on_answer(self, response: agent_pb2.SwitchModeRequestResponse, now_ms: int) -> Finished:
        tc = self._card()
        result = tc.switch_mode_tool_call.result
        match response.WhichOneof("result"):
            case "approved":
                result.success.from_mode_id = self.settings.mode
                result.success.to_mode_id = self.target
                text = (
                    f"The user approved: the conversation is now in {self.target} mode "
                    f"(was {self.settings.mode}). Its tools apply from your next step."
                )
                return self._finish(text, tc, now_ms, effect=ModeSwitched(mode=self.target))
            case "rejected":
                reason = response.rejected.reason or "no reason given"
                result.rejected.reason = reason
                return self._finish(
                    f"The user declined switching to {self.target} mode: {reason}. Stay in "
                    f"{self.settings.mode} mode.",
                    tc,
                    now_ms,
                    is_error=True,
                )
            case _:
                return self._finish_error(
                    "Error: the client answered the SwitchMode request with neither an "
                    "approval nor a rejection; the mode did not change.",
                    now_ms,
                )
