"""A run: one client stream driving one conversation (design §6-7, §15, made asyncio).

`apply(input)` is the design's `run`: `transition` → commit (when the committed state changed,
with the records the transition calls for, before anything is sent) → publish the emitted
events and cards → execute the command. Every input of the run goes through it one at a time:
client messages from the run's inbox, model events straight from their stream reader, tool
deadlines from their timer. The runtime decides nothing: how a turn goes on and how the run
ends are the loop's commands, executed here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping
from typing import Any, assert_never

import msgspec

from ...llm.events import DoneEvent, ErrorEvent, ResponseEvent
from ...llm.model_names import Resolved, Unknown, Via
from ...llm.models import Model
from ...llm.stream import PreparedRequest
from ...llm.types import UserMessage as LLMUserMessage
from ...loop import (
    AwaitClient,
    CallClient,
    CallLLM,
    Cancel,
    Canceled,
    Compact,
    Compacted,
    ContextWindow,
    ContinueLLM,
    Failed,
    Final,
    Input,
    LLMEvent,
    LostCause,
    Note,
    ResendLLM,
    Resume,
    Rewind,
    RuntimeState,
    Start,
    Summarize,
    Supersede,
    Suspend,
    SuspendCause,
    ToolLost,
    Transition,
    TurnContext,
    WaitInput,
    admit,
    ids,
    transition,
)
from ...store.api import ClientOperationRecord, CommitStatus, LLMCallRecord, RunRecord
from ..connect.channel import Incoming, RunChannel
from ..cursor import (
    ClientContext,
    ClientLink,
    ContextPart,
    Ending,
    InteractionAnswered,
    Malformed,
    McpDefinition,
    RunAction,
    RunRequest,
    RunRequested,
    ShellCommandRun,
    StreamEncoder,
    bad_request_end,
    canceled_end,
    internal_end,
    merge_context,
    summary_completed,
    summary_started,
    summary_text,
    text_delta,
    turn_ended,
)
from ..cursor.children import recognise_child
from ..cursor.encode import call_id_for
from ..cursor.rpc import agent_title
from ..cursor.tools import sanitize_tool_call_id
from ..cursor.tools.cards import task_progress_frame
from ..cursor.values import BackgroundCompletions, CancelSubagent
from . import records
from .access import Admissions
from .actions import ROUTES, Route, shell_command_note
from .calls import ModelCalls
from .checkpoints import Checkpoints, PendingBlob
from .context import client_history, context_parts, turn_context, with_kept
from .conversation import Conversation
from .ending import Reports, RunFailed, end_error, ending_of, failure_ending
from .requests import ClientRequests
from .resume import consume_exception, first_message
from .routing import STOP, ClientMessages, Work
from .runner import Runner
from .subagents import (
    Expected,
    carried,
    helper_totals,
    link_of,
    place,
    recovered,
    with_reports,
)
from .summaries import (
    HOOK_MESSAGE,
    NOTHING_TO_COMPACT,
    SummaryCalls,
    context_window,
)
from .summary import CompactionSummary, RunSummary
from .tools import ToolCalls

log = logging.getLogger("cursor_byok.runtime")

MAX_CAS_RETRIES = 5


class Run:
    def __init__(
        self,
        runner: Runner,
        channel: RunChannel,
        *,
        resumable: bool = True,
        token_id: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.runner = runner
        # The person token this run is made under (None: no limits). Subagents: a child run
        # is created with its parent's `token_id`, so its calls count toward that token's
        # budget and rate and keep to its models (access.py).
        self.token_id = token_id
        # The run's forwarded headers (a child's parent ids), read at its run request.
        self.headers: Mapping[str, str] = headers if headers is not None else {}
        self.services = runner.services
        self.store = runner.services.store
        self.channel = channel
        self.resumable = resumable
        self.summary = RunSummary(request_id=channel.request_id, token_id=token_id or "")
        self.reports = Reports(
            self.summary,
            on_llm_call=self.services.on_llm_call,
            on_run_end=self.services.on_run_end,
        )
        self.ended = asyncio.Event()
        now_ms = self.services.now_ms
        self.link = ClientLink(
            conversation_id="", now_ms=now_ms, page_text_chars=self.services.page_text_chars
        )
        self.requests = ClientRequests(channel, self.link, self.services.context_timeout_s)
        self.tools = ToolCalls(
            self.link,
            timeout_s=self.services.tool_timeout_s,
            question_timeout_s=self.services.question_timeout_s,
            now_ms=now_ms,
            on_timeout=self._tool_timed_out,
        )
        self.calls: ModelCalls | None = None
        self.admissions: Admissions | None = None  # the token's answer for each model call
        self.summaries: SummaryCalls | None = None
        self.window: ContextWindow | None = None
        self.checkpoints: Checkpoints | None = None
        self.model: Model | None = None
        self.conversation_id = ""
        self.conv = Conversation("", self.store, runner.committed_states)
        self.turn_id: str | None = None  # the turn this run drives, once it began or resumed
        self._inbox: asyncio.Queue[Work] = asyncio.Queue()
        self._lock = asyncio.Lock()
        self._done = False
        self._encoders: dict[str, StreamEncoder] = {}
        self._pending_blob: PendingBlob | None = None
        self._closing: set[asyncio.Future[Any]] = set()
        self._run_saved: asyncio.Future[Any] | None = None
        self._parts: tuple[ContextPart, ...] = ()  # the run's context parts, for follow-ups
        self._mcp_tools: tuple[McpDefinition, ...] = ()
        self._helper_calls: list[str] = []  # the tool-call ids of this run's Task calls
        self._parent_call: Expected | None = None  # a child run's parent call, when known
        self._route = ClientMessages(
            channel=channel,
            link=self.link,
            requests=self.requests,
            tools=self.tools,
            inbox=self._inbox,
            now_ms=now_ms,
            follow_up_context=self._follow_up_context,
            unknown_event=runner.unknown_event,
            run_job=self.services.run_job,
            job_timeout_s=self.services.tool_timeout_s,
        )

    # -- lifecycle -----------------------------------------------------------------------

    async def serve(self) -> None:
        conversation_id = ""
        try:
            first = await first_message(self.channel, self.store, resumable=self.resumable)
            if first is None:
                return
            # Replies to what the run asked resolve their waiters the moment they arrive (no
            # task in between); inputs for the loop join the inbox, in order.
            self.channel.route(self._route)
            self.channel.watch_gone(self._route.gone)  # cancel #23: the stream-closed signal
            request = self._run_request(first)
            conversation_id = request.conversation_id
            self._adopt(request)
            if self.resumable:
                # Only a RunSSE can be reopened by request_id after a restart (`_first_message`),
                # so only its run request is kept. Not awaited here: queued before the first
                # commit, it usually shares its transaction; awaited once the run has begun.
                self._run_saved = asyncio.ensure_future(
                    self.store.save_run(
                        RunRecord(
                            request_id=self.channel.request_id,
                            conversation_id=conversation_id,
                            request=first.payload,
                            created_at_ms=self.services.now_ms(),
                        )
                    )
                )
            if ROUTES[request.action].route is Route.CANCEL_CHILD:
                # Before the claim: the parent's own run, still going, must stay alive.
                self._cancel_child(request)
                return
            lock = await self.runner.claim(self, conversation_id)
            async with lock:
                await self._begin(first.input_id, request)
                if self._run_saved is not None:
                    await self._run_saved
                await self._consume()
        except asyncio.CancelledError:
            # cancel #23: the true cause (a shutdown, a client gone), not always a shutdown
            self._end(canceled_end(self._route.stop_reason), "canceled")
            raise
        except Exception as exc:
            self._failed(exc)
        finally:
            if conversation_id:
                self.runner.release(self, conversation_id)
            if not self.channel.finished:
                self.channel.finish(end_error(internal_end("the run ended unexpectedly")))
            self.ended.set()

    def _failed(self, exc: Exception) -> None:
        """End the run for an exception raised while it worked."""
        ending, outcome = ending_of(exc, self.channel.request_id)
        self._end(ending, outcome)
        self._stop_everything()

    def close(self) -> None:
        self.reports.report_calls()
        self.channel.route(None)
        self.channel.watch_gone(None)  # cancel #23
        if self._run_saved is not None and not self._run_saved.done():
            self._run_saved.add_done_callback(consume_exception)
        self._route.close()
        self.tools.abort_all()
        self._drop_pending_blob()
        if self.calls is not None:
            self.calls.close()
        if self.summaries is not None:
            self.summaries.close()

    def _cancel_child(self, request: RunRequest) -> None:
        """cancel_subagent_action: that helper's run ends canceled; this run is empty."""
        if isinstance(request.payload, CancelSubagent):
            found = self.runner.cancel_child(request.payload.subagent_id)
            log.info(
                "run %s: cancel of helper %s (%s)",
                self.channel.request_id,
                request.payload.subagent_id,
                "its run was canceled" if found else "no run of it is going here",
            )
        self.channel.send(turn_ended(self.summary.usage))
        self._end(None, "ok")

    def _progress_to_parent(self, card: bytes) -> None:
        """A helper's progress card, shown in its parent's Task card too (when the parent's
        run is going in this process)."""
        call = self._parent_call
        if call is None or not call.card_call_id:
            return
        parent = self.runner.active_run(call.parent_conversation_id)
        if parent is not None:
            parent.channel.send(task_progress_frame(call.card_call_id, call.model_call_id, card))

    def cancel_as_child(self) -> None:
        """The parent's user canceled this helper (cancel_subagent_action)."""
        self._inbox.put_nowait(Work(Cancel(reason="the helper was canceled"), None))

    def supersede(self) -> None:
        """A newer run wants this conversation: the loop decides what that means for this one."""
        self._inbox.put_nowait(Work(Supersede(), None))

    def suspend(self, cause: SuspendCause) -> None:
        """Stop without deciding the turn (the same run goes on elsewhere): cancel #23."""
        self._inbox.put_nowait(Work(Suspend(cause=cause), None))

    def _run_request(self, first: Incoming) -> RunRequest:
        inbound = self.link.receive(first.message)
        match inbound:
            case RunRequested(request=request):
                return request
            case Malformed(error=error):
                raise RunFailed(bad_request_end(error))
            case _:
                raise RunFailed(bad_request_end("the first message of a run must be a run_request"))

    def _adopt(self, request: RunRequest) -> None:
        self.conversation_id = request.conversation_id
        self.link.conversation_id = request.conversation_id
        self.summary.conversation_id = request.conversation_id
        self.summary.requested_model = request.model_id or ""
        if request.user_text.strip():
            self.summary.title = agent_title(request.user_text)
        self.model = self._resolve_model(request.model_id)
        # Whether a Read of an image attaches it (else it is described): the model's `vision`.
        self.link.vision = self.model.vision
        self.link.model_id = self.model.id
        self.summary.model = self.model.id
        self.summary.provider = self.model.provider.name
        self.calls = ModelCalls(
            model=self.model,
            llm=self.services.llm_for(self.model),
            store=self.store,
            bases=self.runner.request_bases,
            conversation_id=request.conversation_id,
            on_event=self._on_llm_event,
            token_id=self.token_id,
            models=self.services.models,
            llm_for=self.services.llm_for,
            owner=self.runner.replica,  # cancel #23: the process lease
        )
        summarizer = self._summarizer(self.model)
        self.admissions = Admissions(
            self.runner.token_limits,
            self.token_id,
            model=self.model,
            summarizer=summarizer,
            models=self.services.models,
        )
        self.window = context_window(self.model, summarizer)
        self.summaries = SummaryCalls(
            summarizer=summarizer,
            llm=self.services.llm_for(summarizer),
            store=self.store,
            conversation_id=request.conversation_id,
            summary_output=self.window.summary_output,
            deliver=self._apply_from_task,
            token_id=self.token_id,
            owner=self.runner.replica,  # cancel #23: the process lease
        )
        self.conv = Conversation(request.conversation_id, self.store, self.runner.committed_states)
        self.checkpoints = Checkpoints(
            conversation_id=request.conversation_id,
            store=self.store,
            states=self.runner.committed_states,
            requests=self.requests,
            channel=self.channel,
            background=self._background,
            window=self.model.context_window,
        )

    def _summarizer(self, model: Model) -> Model:
        """The model that writes this run's summaries: its compaction_model, else itself."""
        if model.compaction_model is not None:
            other = self.services.models.get(model.compaction_model)
            if other is not None:
                return other
        return model

    def _with_window(self, context: TurnContext) -> TurnContext:
        """The turn's context with the run's model budget (the loop's compaction decisions)."""
        if self.window is None or context.window == self.window:
            return context
        return msgspec.structs.replace(context, window=self.window)

    def _resolve_model(self, model_id: str | None) -> Model:
        match self.services.model_names.resolve(model_id):
            case Unknown() as unknown:
                raise RunFailed(bad_request_end(unknown.message()))
            case Resolved(model=model, via=Via.DEFAULT) if model_id:
                log.info(
                    "run %s: model %r is not served; using the default %s",
                    self.channel.request_id,
                    model_id,
                    model.id,
                )
                return model
            case Resolved(model=model):
                return model
            case never:
                assert_never(never)

    def _background(self, work: Awaitable[Any], what: str) -> None:
        """A write nobody waits for; its failure is logged, never lost silently."""
        task = asyncio.ensure_future(work)
        self._closing.add(task)
        request_id = self.channel.request_id

        def done(future: asyncio.Future[Any]) -> None:
            self._closing.discard(future)
            if not future.cancelled() and (exc := future.exception()) is not None:
                log.error("run %s: saving %s failed: %s", request_id, what, exc)

        task.add_done_callback(done)

    def _end(self, ending: Ending | None, outcome: str) -> None:
        if self._done:
            return
        self._done = True
        self._end_calls(ending.message if ending is not None else "the run ended")
        self.channel.finish(end_error(ending) if ending is not None else None)
        self._inbox.put_nowait(STOP)
        self.reports.ended(ending, outcome)

    def _end_calls(self, reason: str) -> None:
        """cancel #23: calls still "planned" as the run ends end with its reason (aborted,
        with what they had shown), counted and saved: no record stays planned."""
        now = self.services.now_ms()
        ended = self.calls.end_all(reason, now) if self.calls is not None else []
        if self.summaries is not None:
            ended += self.summaries.end_all(reason, now)
        if ended:
            self.reports.account(ended, turn_ends=False)
            self.runner.save_ended_calls(ended)

    # -- the start of a run -----------------------------------------------------------------

    @property
    def state(self) -> RuntimeState:
        return self.conv.state

    @property
    def version(self) -> int:
        return self.conv.version

    async def _begin(self, input_id: str, request: RunRequest) -> None:
        assert self.checkpoints is not None
        route = ROUTES[request.action]
        match route.route:
            case Route.EMPTY_TURN:
                log.info(
                    "run %s: %s ends as an empty turn", self.channel.request_id, request.action
                )
                self.channel.send(turn_ended(self.summary.usage))
                self._end(None, "ok")
                return
            case Route.CANCEL_CHILD:
                self._cancel_child(request)
                return
            case Route.TURN | Route.RESUME | Route.NOTE | Route.COMPACT:
                pass
            case _:
                assert_never(route.route)
        cid = request.conversation_id
        self.checkpoints.carried = request.subagent_state
        stored = await self.conv.load()
        # Input commits belong to a stored conversation: without one there is nothing to find.
        previous = await self.store.find_input_commit(cid, input_id) if stored else None
        if stored:
            await self._rewind_if_behind(request, input_id)
        else:
            self.checkpoints.new_conversation()
        if request.action == RunAction.RESUME or previous is not None:
            # A reopened run, or the same run request again: continue, never apply it twice.
            await self._apply(await self._resume(None), None)
            self.turn_id = self.state.committed.turn_id
            return
        if route.route == Route.COMPACT:
            await self._apply(Compact(), input_id)
            return
        if isinstance(request.payload, ShellCommandRun):
            await self._apply(Note(message=shell_command_note(request.payload)), input_id)
            return
        if request.user_message is None and request.build is None:
            raise RunFailed(bad_request_end("the run request carries no user message"))
        if isinstance(request.payload, BackgroundCompletions):
            request = await with_reports(request, request.payload, self.store, self.runner)
        history: tuple[Any, ...] = ()
        if not stored:
            history = await client_history(request, self.requests, self.runner.client_blobs)
        last = self.state.committed.context if stored else None
        kept = last.kept_parts if last is not None else ()
        self._parts = await context_parts(request, self.requests, self.runner.client_blobs, kept)
        self._mcp_tools = request.mcp_tools
        context = self._with_window(
            await turn_context(
                request,
                self._parts,
                self.requests,
                self.services.disabled_tools,
                self.services.enabled_tools,
                self.services.web_search_configured,
                self.services.image_generation,
            )
        )
        child = recognise_child(request.child, self.headers, self.channel.request_id)
        context, parent_call = place(
            context,
            request,
            child,
            last,
            self.runner.children,
            self.services.model_names,
            self.services.subagent_max_depth,
        )
        self._parent_call = parent_call
        if parent_call is not None and child is not None:
            link = link_of(parent_call, cid, child.subagent_type, self.services.now_ms())
            await self.store.save_subagent_link(link)
        # A Build has no user message: the loop opens its turn with the plan.
        message = request.user_message or LLMUserMessage(content=())
        context = with_kept(context, self._parts, kept)  # the blobs later turns may need
        context = self._with_fallbacks(context)
        start = Start(
            user_message=message,
            context=context,
            history=history,
            todos=() if stored else request.history.todos,  # our own list wins
            build=request.build,
        )
        await self._apply(start, input_id)
        self.turn_id = self.state.committed.turn_id

    async def _rewind_if_behind(self, request: RunRequest, input_id: str) -> None:
        """The client wins when its checkpoint is behind ours: the loop gets a Rewind to the
        last turn the client lists (its view comes from the loop's own turn marks)."""
        assert self.checkpoints is not None
        turns = self.checkpoints.rewind_target(request.history.turn_blob_ids, self.state.committed)
        if turns is None:
            return
        before = self.version
        await self._apply(Rewind(turns=turns), f"{input_id}:rewind")
        if self.version != before:
            log.info(
                "conversation %s rewound by the client to turn %d (%d messages)",
                self.conversation_id,
                turns,
                len(self.state.committed.messages),
            )

    async def _resume(self, turn_id: str | None) -> Resume:
        """A Resume with what the store knows of the operation the turn waits on."""
        resume, record = await self.conv.resume(turn_id)
        if record is not None:
            self.tools.remember(record)
        waiting = self.state.committed.waiting
        if resume.operation is not None and isinstance(waiting, AwaitClient):
            operation = await recovered(
                resume.operation,
                waiting,
                self.conversation_id,
                self.store,
                self.runner,
                self.services.question_timeout_s,
            )
            if operation is not resume.operation:  # a Task result rebuilt from its helper
                call = waiting.calls[waiting.next]
                self._helper_calls.append(sanitize_tool_call_id(call.id))
                return msgspec.structs.replace(resume, operation=operation)
        return resume

    # -- client messages --------------------------------------------------------------------

    def _follow_up_context(self, client: ClientContext) -> TurnContext:
        """The context a follow-up brought, merged with the run's parts and MCP tools."""
        stored = self.state.committed.context
        merged = merge_context(
            client,
            self._parts,
            self._mcp_tools,
            mode=stored.mode if stored is not None else "agent",
            custom_instructions=stored.custom_instructions if stored is not None else None,
            suppress_subagent_progress_update_tool=(
                stored.switches.suppress_subagent_progress_update_tool
                if stored is not None
                else None
            ),
            disabled_tools=self.services.disabled_tools,
            enabled_tools=self.services.enabled_tools,
            web_search_configured=self.services.web_search_configured,
            image_generation=self.services.image_generation,
        )
        kept = with_kept(merged, self._parts, stored.kept_parts if stored is not None else ())
        return self._with_window(self._with_fallbacks(carried(kept, stored)))

    def _with_fallbacks(self, context: TurnContext) -> TurnContext:
        """The run's model's fallbacks, configuration the loop reads to decide on one."""
        fallbacks = self.model.fallbacks if self.model is not None else ()
        if context.fallbacks == fallbacks:
            return context
        return msgspec.structs.replace(context, fallbacks=fallbacks)

    async def _consume(self) -> None:
        while not self._done:
            work = await self._inbox.get()
            if work is STOP:
                return
            item = work.input if work.input is not None else await self._resume(self.turn_id)
            await self._apply(item, work.input_id, completes=work.completes)

    async def _on_llm_event(self, call_id: str, event: ResponseEvent) -> None:
        """An event of a model call's stream, from the task that reads it."""
        if isinstance(event, DoneEvent | ErrorEvent):
            self.summary.usage = self.summary.usage + event.message.usage
        await self._apply_from_task(LLMEvent(call_id=call_id, event=event), f"{call_id}:end")

    async def _tool_timed_out(self, operation_id: str, waited_ms: int) -> None:
        for frame in self.tools.abort(operation_id):
            self.channel.send(frame)
        lost = ToolLost(operation_id=operation_id, cause=LostCause.TIMED_OUT, waited_ms=waited_ms)
        await self._apply_from_task(lost, f"{operation_id}:lost")

    async def _apply_from_task(self, input: Input, input_id: str) -> None:
        """`_apply` from a task of its own (a stream reader, a timer): what goes wrong there
        ends the run the way it would in `serve`."""
        try:
            await self._apply(input, input_id)
        except Exception as exc:
            self._failed(exc)

    # -- apply: transition, commit, publish, execute ------------------------------------------

    async def _apply(
        self, input: Input, input_id: str | None, *, completes: ClientOperationRecord | None = None
    ) -> None:
        async with self._lock:
            if self._done:
                return
            reloaded = False
            for _ in range(MAX_CAS_RETRIES):
                t = transition(self.state, input)
                if t.ignored is not None and reloaded:
                    # The state changed under this run and the input no longer applies (the
                    # loop says why): the loop says what the run does now.
                    input, reloaded = await self._resume(self.turn_id), False
                    continue
                if self.admissions is not None and self.admissions.asks(t.command):
                    t = await self._admit(t)
                if t.state is self.state:
                    if t.call_end is not None:  # cancel #23: a call ended, nothing committed
                        await self._save_call_end(input, t)
                    if completes is not None:
                        self._background(self.store.save_client_operation(completes), "a result")
                    if t.compacted is not None:  # nothing to compact, nothing to commit
                        self._compacted(t.compacted)
                    await self._execute(t)
                    return
                if t.state.committed is self.state.committed:
                    self.conv.state = t.state  # pending only: in memory, never stored
                    self._publish(t, input)
                    await self._execute(t)
                    return
                assert self.calls is not None and self.checkpoints is not None
                prepared = self._prepare(t)
                if isinstance(t.command, Final) and not t.command.replay:
                    self._pending_blob = self.checkpoints.send_blob(t.state.committed)
                status = await self._commit(input, input_id, t, prepared, completes)
                if status == "committed":
                    self._publish(t, input)
                    await self._execute(t, prepared)
                    return
                self._drop_pending_blob()
                if status == "duplicate":  # applied before (another process): continue there
                    input, completes = await self._resume(self.turn_id), None
                    continue
                reloaded = True  # a conflict: the same input again, on the stored state
            raise RunFailed(internal_end("the conversation kept changing under this run"))

    async def _admit(self, t: Transition) -> Transition:
        """The admission answer for the model call `t` plans, before its commit: the loop
        decides what a refusal means (`loop.admit`)."""
        assert self.admissions is not None and self.calls is not None
        assert isinstance(t.command, CallLLM | ResendLLM | Summarize)
        admitted = admit(self.state, t, await self.admissions.answer(t.command))
        end = admitted.call_end
        if end is not None and end.call_id == t.command.call_id:
            # A refused call resumed from the store: its record is finished with the refusal.
            assert self.summaries is not None
            calls = self.summaries if isinstance(t.command, Summarize) else self.calls
            await calls.recall(end.call_id)
        return admitted

    def _prepare(self, t: Transition) -> PreparedRequest | None:
        """The exact request of the call the transition decides, for its commit."""
        assert self.calls is not None and self.summaries is not None
        if isinstance(t.command, CallLLM):
            return self.calls.prepare(t.command)
        if isinstance(t.command, Summarize):
            return self.summaries.prepare(t.command)
        return None

    async def _commit(
        self,
        input: Input,
        input_id: str | None,
        t: Transition,
        prepared: PreparedRequest | None,
        completes: ClientOperationRecord | None,
    ) -> CommitStatus:
        assert self.calls is not None and self.summaries is not None
        after = t.state.committed
        now = self.services.now_ms()
        calls: list[LLMCallRecord] = []
        operations: list[ClientOperationRecord] = []
        finished = self._ended_call(input, t, now)
        if finished is not None:
            calls.append(finished)
        on_commit = None
        if isinstance(t.command, CallLLM):
            assert prepared is not None
            planned, on_commit = self.calls.planned(t.command, prepared, after.turn_id, now)
            calls.append(planned)
        elif isinstance(t.command, Summarize):
            assert prepared is not None
            calls.append(self.summaries.planned(t.command, prepared, after.turn_id, now))
        if completes is not None:
            operations.append(completes)
        for local in t.local_results:
            # A call the loop answered for the client (lost, timed out, canceled): its record,
            # when there is one, keeps that answer.
            known = self.tools.record(ids.operation_id(local.llm_call_id, local.call.id))
            if known is not None and known.status != "completed" and known is not completes:
                operations.append(records.completed_operation(known, local.result, now))
        if isinstance(t.command, CallClient):
            operations.append(self.tools.planned(t.command, after))
        status = await self.conv.commit(
            t,
            input_id,
            calls=calls,
            operations=operations,
            # Losing a commit whose command is a model call costs at most that call again (same
            # bytes); every commit that sends a tool or ends a turn is fsynced, with all before.
            durable=self.services.fsync_model_calls or not isinstance(t.command, CallLLM),
        )
        if status == "committed":
            if on_commit is not None:
                on_commit()
            self.reports.account(calls, turn_ends=isinstance(t.command, Final))
            if isinstance(t.command, CallLLM) and t.command.fallback_of:
                self._fell_back(t.command, t.call_end.error if t.call_end is not None else None)
        return status

    def _ended_call(self, input: Input, t: Transition, now: int) -> LLMCallRecord | None:
        """The record of the call `t` ends: a model call's, else a summary call's (ended by
        its answer, or stopped: its stream aborted here, cancel #23)."""
        assert self.calls is not None and self.summaries is not None
        if t.call_end is None:
            return None
        event = input.event if isinstance(input, LLMEvent) else None
        finished = self.calls.finished(t.call_end, event, now)
        return finished if finished is not None else self.summaries.finished(t.call_end, now)

    async def _save_call_end(self, input: Input, t: Transition) -> None:
        """cancel #23: a call the loop ended without a state change (Suspend), recorded alone."""
        finished = self._ended_call(input, t, self.services.now_ms())
        if finished is not None:
            await self.store.save_llm_call(finished)
            self.reports.account([finished], turn_ends=False)

    def _fell_back(self, command: CallLLM, why: str | None) -> None:
        """One log line and one count per fallback the loop decided."""
        assert self.calls is not None
        failed = self.calls.target(command.fallback_of).model.id
        log.warning(
            "run %s: model %s failed before its first output (%s); falling back to %s (call %s)",
            self.channel.request_id,
            failed,
            why or "no error message",
            command.model,
            command.call_id,
        )
        self.summary.fallbacks += 1
        if self.services.on_fallback is not None:
            asyncio.get_running_loop().call_soon(self.services.on_fallback, failed, command.model)

    def _publish(self, t: Transition, input: Input) -> None:
        """Send what the transition emitted, and the cards of the calls it answered itself."""
        send = self.channel.send
        if t.emit and isinstance(input, LLMEvent):
            encoder = self._encoders.get(input.call_id)
            if encoder is not None:
                for event in t.emit:
                    frame = encoder.encode(event)
                    if frame is not None:
                        send(frame)
        if t.compacted is not None:
            self._compacted(t.compacted)
        if t.checkpoint is not None and self.checkpoints is not None:
            # A model call changed the history: the IDE's meter and turn list move now.
            committed = t.state.committed
            self.checkpoints.mid_turn(committed, t.checkpoint.pending_tool_calls)
        if t.local_results:
            context = t.state.committed.context
            routes = {r.name: r for r in context.mcp_routes} if context is not None else {}
            for local in t.local_results:
                for frame in self.link.local_card(
                    local.call,
                    local.result,
                    llm_call_id=local.llm_call_id,
                    content_index=local.content_index,
                    route=routes.get(local.call.name),
                    todos=local.todos,
                ):
                    send(frame)

    def _expect_child(self, command: CallClient) -> None:
        context = self.state.committed.context
        subagents = context.subagents if context is not None else None
        prompt = command.tool_call.arguments.get("prompt")
        tool_call_id = sanitize_tool_call_id(command.tool_call.id)
        self._helper_calls.append(tool_call_id)
        self.runner.children.expect(
            Expected(
                parent_conversation_id=self.conversation_id,
                parent_request_id=self.channel.request_id,
                tool_call_id=tool_call_id,
                card_call_id=call_id_for(command.llm_call_id, command.content_index),
                model_call_id=command.llm_call_id,
                prompt=prompt if isinstance(prompt, str) else "",
                depth=subagents.depth if subagents is not None else 0,
                root_conversation_id=(
                    subagents.root_conversation_id
                    if subagents is not None and subagents.root_conversation_id
                    else self.conversation_id
                ),
            )
        )

    async def _execute(self, t: Transition, prepared: PreparedRequest | None = None) -> None:
        """Design §6 `runCommand`. Idempotent: a call already streaming or a tool already on
        the client is left as it is."""
        assert self.calls is not None
        command = t.command
        match command:
            case ContinueLLM() | WaitInput():
                return
            case CallLLM(call_id=call_id):
                self._encoder(call_id)
                self.calls.open(call_id, prepared or self.calls.prepare(command))
            case ResendLLM(call_id=call_id):
                self._encoder(call_id)
                await self.calls.resend(command)
            case Summarize():
                assert self.summaries is not None
                self.channel.send(summary_started())
                await self.summaries.start(command, prepared)
            case CallClient(operation_id=op):
                if self.tools.running(op):
                    return
                started = self.tools.start(command, self.state.committed)
                for frame in started.frames:
                    self.channel.send(frame)
                early = started.early
                if early is not None:  # unusable arguments: the answer is known at once
                    self.channel.send(early.card)
                    if command.tool_call.name == "UpdateCurrentStep":
                        self._progress_to_parent(early.card)
                    self._inbox.put_nowait(self._route.tool_result(op, early.result))
                elif started.wake_after_ms is not None:  # it opens by waiting
                    self._route.wake_later(op, started.wake_after_ms)
                elif command.tool_call.name == "Task":  # its child run is expected next
                    self._expect_child(command)
            case Final(message=message, replay=replay):
                if replay:
                    # An answer committed before, which the client may not have seen.
                    if message.text:
                        self.channel.send(text_delta(message.text))
                    self.channel.send(turn_ended(message.usage))
                else:
                    # The protocol's order: turn_ended (the client stops showing
                    # "generating"), then the final checkpoint, then the end of the stream.
                    if self._helper_calls:  # the helpers' tokens join the turn's totals
                        helpers = await helper_totals(
                            self.store, self.conversation_id, self._helper_calls
                        )
                        self.summary.helper_usage, self.summary.helper_cost_usd = helpers
                    usage = self.summary.usage + self.summary.helper_usage
                    self.channel.send(turn_ended(usage))
                    await self._publish_checkpoint()
                self._end(None, "ok")
            case Failed(message=message, kind=kind, limit=limit):
                self._stop_everything()
                text = message.error_message or "the model call failed"
                if limit is not None:
                    self.summary.refused_by = limit.value
                    log.info(
                        "run %s: %s limit refused a model call: %s",
                        self.channel.request_id,
                        limit.value,
                        text,
                    )
                self._end(failure_ending(kind, text, limit), "failed")
            case Canceled(reason=reason):
                self._stop_everything()
                self._end(canceled_end(reason), "canceled")
            case _:
                assert_never(command)

    def _compacted(self, done: Compacted) -> None:
        """Tell the client a compaction is done (summary_started came with its call; with
        nothing to compact there was none), the operator too: one log line and the metrics."""
        send = self.channel.send
        if not done.call_id:
            send(summary_started())
            send(summary_completed(NOTHING_TO_COMPACT))
            return
        send(summary_text(done.summary))
        send(summary_completed(HOOK_MESSAGE))
        assert self.model is not None
        log.info(
            "conversation %s compacted (%s, model %s): %d messages summarized, %d kept, "
            "about %d tokens before, %d after",
            self.conversation_id,
            done.reason,
            self.model.id,
            done.summarized,
            done.kept,
            done.tokens_before,
            done.tokens_after,
        )
        hook = self.services.on_compaction
        if hook is not None:
            summary = CompactionSummary(
                model=self.model.id,
                reason=str(done.reason),
                tokens_before=done.tokens_before,
                tokens_after=done.tokens_after,
            )
            try:
                hook(summary)
            except Exception:
                log.exception("metrics: could not count a compaction")

    def _encoder(self, call_id: str) -> StreamEncoder:
        encoder = self._encoders.get(call_id)
        if encoder is None:
            encoder = StreamEncoder(model_call_id=call_id, now_ms=self.services.now_ms)
            self._encoders[call_id] = encoder
        return encoder

    async def _publish_checkpoint(self) -> None:
        assert self.checkpoints is not None
        pending, self._pending_blob = self._pending_blob, None
        state = self.state.committed
        if pending is None:
            pending = self.checkpoints.send_blob(state)
        await self.checkpoints.publish(pending, state, self.version)

    def _drop_pending_blob(self) -> None:
        pending, self._pending_blob = self._pending_blob, None
        if pending is not None and self.checkpoints is not None:
            self.checkpoints.drop(pending)

    def _stop_everything(self) -> None:
        for frame in self.tools.abort_all():
            self.channel.send(frame)
        if self.calls is not None:
            self.calls.close()
        if self.summaries is not None:
            self.summaries.close()

    # -- for the next issues: interaction queries ---------------------------------------------

    async def ask(
        self, frame_for: Any, what: str, timeout: float | None = None
    ) -> InteractionAnswered:
        """Ask the client an interaction query (`frame_for(id)` builds it) and wait for its
        answer, which the client's interaction_response with that id delivers."""
        return await self.requests.ask(frame_for, what, timeout)


__all__ = ["Run", "RunFailed"]
