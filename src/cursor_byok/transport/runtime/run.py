"""A run: one client stream driving one conversation (design §6-7, §15, made asyncio).

`apply(input)` is the design's `run`: `transition` → commit (when the committed state changed,
with the records the transition calls for, before anything is sent) → publish the emitted
events and cards → execute the command. Every input of the run goes through it one at a time:
client messages from the run's inbox, model events straight from their stream reader, tool
deadlines from their timer. The runtime decides nothing: how a turn goes on and how the run
ends are the loop's commands, executed here. What the run works with lives beside it: the
parts its run request decides (run_parts.py), its commits' records (commits.py), what it
sends (publish.py) and the Start of its turn (starts.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, assert_never

from ...llm.events import DoneEvent, ErrorEvent, ResponseEvent
from ...loop import (
    Admission,
    CallLLM,
    CallRefused,
    Cancel,
    Compact,
    Input,
    LLMEvent,
    LostCause,
    Note,
    ResendLLM,
    Resume,
    Rewind,
    RuntimeState,
    Summarize,
    Supersede,
    Suspend,
    SuspendCause,
    ToolLost,
    Transition,
    TurnContext,
    admit,
    transition,
)
from ...store.api import ClientOperationRecord
from ..connect.channel import RunChannel
from ..cursor import (
    CancelSubagent,
    ClientContext,
    Ending,
    RunAction,
    RunRequest,
    ShellCommandRun,
    bad_request_end,
    canceled_end,
    internal_end,
    turn_ended,
)
from .access import person_of
from .actions import ROUTES, Route, log_empty_turn, shell_command_note
from .commands import Commands
from .conversation import UNNAMED, Conversation
from .ending import Reports, RunFailed, end_error, ending_of
from .gate import InputGate
from .publish import Publisher
from .resume import (
    BackgroundWrites,
    consume_exception,
    first_message,
    run_request_of,
    save_run_request,
)
from .routing import STOP, Work
from .run_client import RunClient
from .run_helpers import RunHelpers
from .run_parts import RunParts, described, equip, named
from .runner import Runner
from .services import RunnerServices
from .starts import ModelTraits, TurnStart, follow_up_context, start_of
from .summary import RunSummary

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
        # The person of that token (AccessTokenRecord.person, read at the run request): the
        # owner of the conversations the run starts; None (the operator) sees every one.
        self.person: str | None = None
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
        self.client = client = RunClient(
            runner,
            channel,
            token_id=token_id,
            on_timeout=self._tool_timed_out,
            follow_up_context=self._follow_up_context,
            where=lambda: (self.conversation_id, self.state.committed.turn_id or ""),
        )
        self.link, self.requests, self.tools = client.link, client.requests, client.tools
        self._route, self._inbox = client.route, client.inbox
        self.publisher = Publisher(
            channel,
            self.link,
            self.services.now_ms,
            self.services.on_compaction,
            self.services.provider_windows,
        )
        self.parts: RunParts | None = None  # once the run request named the model
        self._effort = ""  # the effort the run's requested_model asks for
        self.conversation_id = ""
        self.conv = Conversation("", self.store, runner.committed_states, state=UNNAMED)
        self.turn_id: str | None = None  # the turn this run drives, once it began or resumed
        self._lock = InputGate()  # one input at a time (gate.py)
        self._done = False
        self._background = BackgroundWrites(channel.request_id)
        self._run_saved: asyncio.Future[Any] | None = None
        self._started: TurnStart | None = None  # the turn's Start, for follow-ups
        self.helpers = RunHelpers(runner, channel.request_id)
        self.commands = Commands(
            channel=channel,
            publisher=self.publisher,
            tools=self.tools,
            requests=self.requests,
            route=self._route,
            inbox=self._inbox,
            helpers=self.helpers,
            summary=self.summary,
            end=self._end,
        )

    # -- lifecycle -----------------------------------------------------------------------

    async def serve(self) -> None:
        conversation_id = ""
        try:
            self.person = await person_of(self.store, self.token_id)  # a stored run: theirs only
            first = await first_message(self.channel, self.store, self.resumable, self.person)
            if first is None:
                return
            # Replies to what the run asked resolve their waiters the moment they arrive (no
            # task in between); inputs for the loop join the inbox, in order. A closed stream
            # becomes the loop's input too (`ClientMessages.gone`).
            self.channel.route(self._route)
            self.channel.watch_gone(self._route.gone)
            request = run_request_of(self.link, first)
            conversation_id = cid = request.conversation_id
            self._adopt(request)
            if self.resumable:  # only a RunSSE can be reopened by request_id after a restart
                now = self.services.now_ms()
                self._run_saved = save_run_request(
                    self.store, self.channel, first, cid, now, self.person
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
            # The true cause when one is known (the client's stream closed), else a shutdown.
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
        self.commands.stop_everything()

    def close(self) -> None:
        self.reports.report_calls()
        self.channel.route(None)
        self.channel.watch_gone(None)
        if self._run_saved is not None and not self._run_saved.done():
            self._run_saved.add_done_callback(consume_exception)
        self._route.close()
        self.tools.abort_all()
        self.helpers.close()
        self.commands.close()
        if self.parts is not None:
            self.parts.calls.close()
            self.parts.summaries.close()

    def _cancel_child(self, request: RunRequest) -> None:
        """cancel_subagent_action: that helper's run ends canceled; this run is empty."""
        if isinstance(request.payload, CancelSubagent):
            self.helpers.cancel(request.payload.subagent_id, self.person)
        self.channel.send(turn_ended(self.summary.usage))
        self._end(None, "ok")

    def cancel_as_child(self) -> None:
        """The parent's user canceled this helper (cancel_subagent_action)."""
        self._inbox.put_nowait(Work(Cancel(reason="the helper was canceled"), None))

    def show_helper_progress(self, frame: bytes) -> None:
        """A helper of this run made progress (Runner.helper_progress): its Task card shows it."""
        self.channel.send(frame)

    def supersede(self) -> None:
        """A newer run wants this conversation: the loop decides what that means for this one."""
        self._inbox.put_nowait(Work(Supersede(), None))

    def suspend(self, cause: SuspendCause) -> None:
        """Stop without deciding the turn: the same run goes on elsewhere (its RunSSE reopened
        on another replica) or the process stops; its model call ends, recorded with `cause`."""
        self._inbox.put_nowait(Work(Suspend(cause=cause), None))

    def _adopt(self, request: RunRequest) -> None:
        self.conversation_id = self.helpers.conversation_id = request.conversation_id
        named(request, self.summary, self.link)
        self._effort = request.effort  # the picker's choice; the loop checks it (loop/effort.py)
        self.parts = parts = equip(
            self.runner,
            request,
            token_id=self.token_id,
            person=self.person,
            channel=self.channel,
            requests=self.requests,
            tools=self.tools,
            reports=self.reports,
            on_event=self._on_llm_event,
            deliver=self._apply_from_task,
            background=self._background,
        )
        described(parts.model, self.summary, self.link)
        self.publisher.model, self.conv, self.commands.parts = parts.model, parts.conv, parts
        self.publisher.checkpoints = parts.checkpoints

    def _end(self, ending: Ending | None, outcome: str) -> None:
        if self._done:
            return
        self._done = True
        self._end_calls(ending.message if ending is not None else "the run ended")
        self.channel.finish(end_error(ending) if ending is not None else None)
        self._inbox.put_nowait(STOP)
        self.reports.ended(ending, outcome)

    def _end_calls(self, reason: str) -> None:
        """Calls still "planned" as the run ends end with its reason (aborted, with what they
        had shown), counted and saved: no record stays planned after its run."""
        ended = self.parts.end_calls(reason, self.services.now_ms()) if self.parts else []
        if ended:
            self.reports.account(ended, turn_ends=False)
            self.runner.save_ended_calls(ended)

    # -- the start of a run -----------------------------------------------------------------

    @property
    def state(self) -> RuntimeState:
        return self.conv.state

    async def _begin(self, input_id: str, request: RunRequest) -> None:
        assert self.parts is not None
        checkpoints = self.parts.checkpoints
        route = ROUTES[request.action]
        match route.route:
            case Route.EMPTY_TURN:
                log_empty_turn(request, self.channel.request_id)
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
        checkpoints.carried = request.subagent_state
        stored = await self.conv.load()
        # Input commits belong to a stored conversation: without one there is nothing to find.
        previous = await self.store.find_input_commit(cid, input_id) if stored else None
        if stored:
            await self._rewind_if_behind(request, input_id)
        else:
            checkpoints.new_conversation()
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
        started = await start_of(
            self.runner,
            request,
            requests=self.requests,
            stored=self.state.committed.context if stored else None,
            new_conversation=not stored,
            headers=self.headers,
            request_id=self.channel.request_id,
            equipped=self.parts,
            traits=ModelTraits.of(self.parts.model, self._effort),
        )
        self._started, self.helpers.parent = started, started.parent_call
        await self._apply(started.start, input_id)
        self.turn_id = self.state.committed.turn_id

    async def _rewind_if_behind(self, request: RunRequest, input_id: str) -> None:
        """The client wins when its checkpoint is behind ours: the loop gets a Rewind to the
        last turn the client lists (its view comes from the loop's own turn marks)."""
        assert self.parts is not None
        checkpoints = self.parts.checkpoints
        found = await checkpoints.marks_found(self.state.committed, self.conv.version)
        if found is not None:  # a state stored before the loop's own marks
            await self._apply(found, f"{input_id}:marks")
        turns = checkpoints.rewind_target(request.history.turn_blob_ids, self.state.committed)
        if turns is None:
            return
        before = self.conv.version
        await self._apply(Rewind(turns=turns), f"{input_id}:rewind")
        if self.conv.version != before:
            cid, n = self.conversation_id, len(self.state.committed.messages)
            log.info(
                "conversation %s rewound by the client to turn %d (%d messages)", cid, turns, n
            )

    async def _resume(self, turn_id: str | None) -> Resume:
        """A Resume with what the store knows of the operation the turn waits on."""
        resume, found = await self.conv.resume(turn_id)
        for record in found:
            self.tools.remember(record)
        return resume

    # -- inputs -----------------------------------------------------------------------------

    def _follow_up_context(self, client: ClientContext) -> TurnContext:
        """The context a follow-up brought, merged with the run's parts and MCP tools."""
        parts, stored = self.parts, self.state.committed.context
        window, fallbacks = (parts.budget(), parts.model.fallbacks) if parts else (None, ())
        traits = ModelTraits.of(parts.model, self._effort) if parts else None
        return follow_up_context(
            self.services, client, stored, self._started, window, fallbacks, traits
        )

    async def _consume(self) -> None:
        while not self._done:
            work = await self._inbox.get()
            if work is STOP:
                return
            item = work.input if work.input is not None else await self._resume(self.turn_id)
            await self._apply(item, work.input_id, completes=work.completes)

    async def _on_llm_event(self, call_id: str, event: ResponseEvent) -> None:
        """A model call's event, from its reader: `_apply_from_task` inline, one call less."""
        if isinstance(event, DoneEvent | ErrorEvent):
            self.summary.usage = self.summary.usage + event.message.usage
        try:
            await self._apply(LLMEvent(call_id=call_id, event=event), f"{call_id}:end")
        except Exception as exc:
            self._failed(exc)

    async def _tool_timed_out(self, operation_id: str, waited_ms: int) -> None:
        for frame in self.tools.abort(operation_id):
            self.channel.send(frame)
        lost = ToolLost(operation_id=operation_id, cause=LostCause.TIMED_OUT, waited_ms=waited_ms)
        await self._apply_from_task(lost, f"{operation_id}:lost")

    async def _apply_from_task(self, input: Input, input_id: str) -> None:
        """`_apply` from a task of its own (a timer): a failure ends the run as in `serve`."""
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
            reloaded, conv = False, self.conv
            refused: CallRefused | None = None  # a reservation the store refused
            for _ in range(MAX_CAS_RETRIES):
                t = transition(conv.state, input)
                if t.ignored is not None and reloaded:
                    # The state changed under this run and the input no longer applies (the
                    # loop says why): the loop says what the run does now.
                    input, reloaded = await self._resume(self.turn_id), False
                    continue
                parts = self.parts
                if (
                    parts is not None
                    and refused is not None
                    and isinstance(t.command, CallLLM | Summarize)
                    and t.command.call_id == refused.call_id
                ):
                    t = await self._admit(parts, t, refused)
                elif parts is not None and parts.admissions.asks(t.command):
                    t = await self._admit(parts, t)
                if t.state is conv.state:
                    if t.call_end is not None and parts is not None:
                        # A call ended with nothing to commit (a Suspend): recorded alone.
                        await parts.commits.save_call_end(input, t)
                    if completes is not None:
                        self._background(self.store.save_client_operation(completes), "a result")
                    if t.compacted is not None:  # nothing to compact, nothing to commit
                        self.publisher.compacted(t.compacted)
                    await self.commands.execute(t)
                    return
                if t.state.committed is conv.state.committed:
                    conv.state = t.state  # pending only: in memory, never stored
                    self.publisher.publish(t, input)
                    await self.commands.execute(t)
                    return
                assert parts is not None
                prepared = parts.commits.prepare(t)
                marks = await self.commands.send_final_blob(t)
                status = await parts.commits.commit(input, input_id, t, prepared, completes, marks)
                if isinstance(status, CallRefused):  # the loop decides what that means
                    self.commands.drop_pending_blob()
                    refused = status
                    continue
                if status == "committed":
                    self.publisher.publish(t, input)
                    await self.commands.execute(t, prepared)
                    return
                self.commands.drop_pending_blob()
                if status == "duplicate":  # applied before (another process): continue there
                    input, completes = await self._resume(self.turn_id), None
                    continue
                reloaded = True  # a conflict: the same input again, on the stored state
            raise RunFailed(internal_end("the conversation kept changing under this run"))

    async def _admit(
        self, parts: RunParts, t: Transition, answer: Admission | None = None
    ) -> Transition:
        """The admission answer for the model call `t` plans, before its commit (or the refusal
        of its reservation, `answer`): the loop decides what a refusal means (`loop.admit`)."""
        assert isinstance(t.command, CallLLM | ResendLLM | Summarize)
        if answer is None:
            answer = await parts.admissions.answer(t.command)
        admitted = admit(self.state, t, answer)
        if (end := admitted.call_end) is not None and end.call_id == t.command.call_id:
            # A refused call resumed from the store: its record is finished with the refusal.
            calls = parts.summaries if isinstance(t.command, Summarize) else parts.calls
            await calls.recall(end.call_id)
        return admitted


def new_runner(services: RunnerServices) -> Runner:
    """The runner of the composition root: each client stream it handles becomes a `Run`."""
    return Runner(services, Run)


__all__ = ["Run", "RunFailed", "new_runner"]
