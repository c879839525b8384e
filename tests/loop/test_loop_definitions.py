"""MCP tools known only by their definition file (loop/definitions.py): the loop decides, before
a run's first model call, which files it needs, reads them through the client
(ReadDefinitions), keeps what came back per path for the run and offers the tools with it (a
failed read with a note). Each test asserts the whole committed state after each input."""

from __future__ import annotations

from msgspec.structs import replace

from cursor_byok.llm.faux import FauxResponse
from cursor_byok.loop import (
    MAX_DEFINITION_CHARS,
    AwaitDefinitions,
    AwaitLLM,
    CallLLM,
    CallRefused,
    Cancel,
    Canceled,
    ConversationState,
    DefinitionFile,
    DefinitionsRead,
    Failed,
    Final,
    Ignored,
    Limit,
    McpServerInfo,
    McpToolInfo,
    ReadDefinitions,
    Resume,
    RuntimeState,
    Span,
    Status,
    TurnContext,
    TurnStart,
    UserMessage,
    WaitInput,
    admit,
    ids,
    render_prompt,
    transition,
)
from cursor_byok.loop.catalogue import Switches
from cursor_byok.loop.definitions import note
from cursor_byok.loop.state import Waiting

from .loop_helpers import start, stream, user

CID = "conv"
GOOD = "/ws/mcps/kb/tools/find_article.json"
BROKEN = "/ws/mcps/kb/tools/broken.json"
LATER = "/ws/mcps/kb/tools/later.json"
SCHEMA = {"type": "object", "properties": {"title": {"type": "string"}}}
OWN = McpToolInfo(name="own", description="Has its own.", parameters=SCHEMA, definition_path=LATER)


def server(*tools: McpToolInfo) -> McpServerInfo:
    return McpServerInfo(identifier="kb", name="Knowledge base", tools=tools)


def by_file(name: str, path: str) -> McpToolInfo:
    return McpToolInfo(name=name, definition_path=path)


META = Switches(mcp_meta_tools=True)  # the prompt lists the MCP servers' tools
CTX = TurnContext(
    switches=META,
    mode="plan",
    mcp_servers=(server(by_file("find_article", GOOD), by_file("broken_tool", BROKEN), OWN),),
)
GOOD_FILE = DefinitionFile(path=GOOD, description="Find an article.", parameters=SCHEMA)
BROKEN_FILE = DefinitionFile(path=BROKEN, error="the client answered file_not_found")
FILLED = TurnContext(
    switches=META,
    mode="plan",
    mcp_servers=(
        server(
            McpToolInfo(
                name="find_article",
                description="Find an article.",
                parameters=SCHEMA,
                definition_path=GOOD,
            ),
            McpToolInfo(
                name="broken_tool",
                description=note(BROKEN, "the client answered file_not_found"),
                definition_path=BROKEN,
            ),
            OWN,  # described by the descriptor itself: its file is not read
        ),
    ),
)


def at(c: ConversationState, n: int, turn: int = 1) -> dict[str, object]:
    """The bookkeeping fields of commit `n` in turn `turn`."""
    return {
        "commit": n,
        "last_commit_id": ids.commit_id(CID, n),
        "turn": turn,
        "turn_id": ids.turn_id(CID, turn),
    }


def reading(paths: tuple[str, ...]) -> tuple[RuntimeState, ConversationState]:
    t = transition(RuntimeState.new(CID), start("find it", CTX))
    assert t.command == ReadDefinitions(paths=paths)
    return t.state, t.state.committed


def test_a_start_reads_the_files_its_tools_need_before_the_first_model_call() -> None:
    state, c = reading((BROKEN, GOOD))
    opening = user("find it")
    assert c == replace(
        ConversationState.new(CID),
        **at(c, 1),
        messages=(opening,),
        log=(opening,),
        status=Status.READING,
        waiting=AwaitDefinitions(paths=(BROKEN, GOOD)),
        context=CTX,
        turn_starts=(TurnStart(view=()),),
    )
    assert c.busy

    # The answers, in any order, one of a path nobody asked for: kept per path, in the order
    # the command named them; the tools offered with them; the model call goes out.
    t = transition(state, DefinitionsRead(files=(GOOD_FILE, BROKEN_FILE, DefinitionFile("/x"))))
    assert isinstance(t.command, CallLLM)
    c2 = t.state.committed
    assert c2 == replace(
        c,
        **at(c, 2),
        status=Status.WAITING_LLM,
        waiting=AwaitLLM(
            call_id=t.command.call_id,
            messages_hash=t.command.messages_hash,
            prompt=t.command.prompt,
        ),
        context=FILLED,
        llm_calls=1,
        definitions=(BROKEN_FILE, GOOD_FILE),
    )
    system = t.command.request.system_prompt
    assert system == render_prompt(FILLED)
    assert "find_article: Find an article. Arguments:" in system
    assert f"(Its definition file {BROKEN} could not be read: the client answered" in system

    # The same answer again is not awaited: nothing changes.
    again = transition(t.state, DefinitionsRead(files=(GOOD_FILE,)))
    assert again.ignored is Ignored.NOT_AWAITED and again.state is t.state


def test_a_file_not_answered_or_too_large_is_a_failed_read_with_a_note() -> None:
    state, c = reading((BROKEN, GOOD))
    huge = DefinitionFile(path=GOOD, description="x" * MAX_DEFINITION_CHARS)
    t = transition(state, DefinitionsRead(files=(huge,)))
    assert isinstance(t.command, CallLLM)
    too_large = DefinitionFile(
        path=GOOD, error=f"the file is larger than {MAX_DEFINITION_CHARS} characters"
    )
    unanswered = DefinitionFile(path=BROKEN, error="no answer")
    c2 = t.state.committed
    assert c2.definitions == (unanswered, too_large)
    waiting: Waiting | None = c2.waiting
    assert c2 == replace(
        c,
        **at(c, 2),
        status=Status.WAITING_LLM,
        waiting=waiting,
        llm_calls=1,
        definitions=(unanswered, too_large),
        context=TurnContext(
            switches=META,
            mode="plan",
            mcp_servers=(
                server(
                    McpToolInfo(
                        name="find_article",
                        description=note(GOOD, too_large.error),
                        definition_path=GOOD,
                    ),
                    McpToolInfo(
                        name="broken_tool",
                        description=note(BROKEN, "no answer"),
                        definition_path=BROKEN,
                    ),
                    OWN,
                ),
            ),
        ),
    )
    assert "x" * 1000 not in t.command.request.system_prompt
    # Exactly at the bound a file is kept.
    fits = DefinitionFile(path=GOOD, description="x" * (MAX_DEFINITION_CHARS - 2))
    kept = transition(state, DefinitionsRead(files=(fits,))).state.committed
    assert kept.definitions[1] == fits


def finished(state: RuntimeState) -> RuntimeState:
    transitions, _ = stream(state, FauxResponse.text("done"))
    assert isinstance(transitions[-1].command, Final)
    return transitions[-1].state


def test_a_follow_up_of_the_run_takes_its_files_from_the_runs_reads() -> None:
    state, _ = reading((BROKEN, GOOD))
    state = transition(state, DefinitionsRead(files=(GOOD_FILE, BROKEN_FILE))).state
    state = finished(state)
    c = state.committed
    # The same tools: nothing is read again, the model call goes out with them filled.
    t = transition(state, UserMessage(message=user("and again"), context=CTX))
    assert isinstance(t.command, CallLLM)
    c2 = t.state.committed
    assert c2.context == FILLED
    assert c2.definitions == c.definitions
    assert c2.status == Status.WAITING_LLM and c2.turn == 2
    # A tool the follow-up brings: only its file is read.
    state = finished(t.state)
    newer = replace(CTX, mcp_servers=(server(*CTX.mcp_servers[0].tools[:2], by_file("n", LATER)),))
    t = transition(state, UserMessage(message=user("with a new tool"), context=newer))
    assert t.command == ReadDefinitions(paths=(LATER,))
    c3 = t.state.committed
    assert c3.status == Status.READING and c3.waiting == AwaitDefinitions(paths=(LATER,))
    later = DefinitionFile(path=LATER, description="Later.", parameters=SCHEMA)
    t = transition(t.state, DefinitionsRead(files=(later,)))
    assert isinstance(t.command, CallLLM)
    assert t.state.committed.definitions == (BROKEN_FILE, GOOD_FILE, later)
    (tool,) = [x for x in t.state.committed.context.mcp_servers[0].tools if x.name == "n"]
    assert tool == McpToolInfo(
        name="n", description="Later.", parameters=SCHEMA, definition_path=LATER
    )


def test_a_new_run_reads_its_files_again() -> None:
    state, _ = reading((BROKEN, GOOD))
    state = finished(transition(state, DefinitionsRead(files=(GOOD_FILE, BROKEN_FILE))).state)
    before = state.committed
    t = transition(state, start("a new run", CTX))
    assert t.command == ReadDefinitions(paths=(BROKEN, GOOD))
    c = t.state.committed
    opening = user("a new run")
    assert c == replace(
        before,
        **at(before, before.commit + 1, turn=2),
        messages=(*before.messages, opening),
        log=(*before.log, opening),
        status=Status.READING,
        waiting=AwaitDefinitions(paths=(BROKEN, GOOD)),
        context=CTX,
        llm_calls=0,
        definitions=(),
        turn_starts=(*before.turn_starts, TurnStart(view=(Span(0, len(before.log)),))),
    )


def test_resume_reads_again_cancel_ends_and_a_steer_joins_before_the_call() -> None:
    state, c = reading((BROKEN, GOOD))
    # A run reopened while the files were read: the same reads (they have no side effect).
    resumed = transition(state, Resume(turn_id=c.turn_id))
    assert resumed.command == ReadDefinitions(paths=(BROKEN, GOOD)) and resumed.state is state
    # A follow-up meanwhile steers: it joins the history before the first model call.
    steered = transition(state, UserMessage(message=user("also this")))
    assert isinstance(steered.command, WaitInput)
    c2 = steered.state.committed
    assert c2 == replace(c, **at(c, 2), queued=(user("also this"),))
    t = transition(steered.state, DefinitionsRead(files=(GOOD_FILE, BROKEN_FILE)))
    assert isinstance(t.command, CallLLM)
    assert t.command.request.messages == (user("find it"), user("also this"))
    assert t.state.committed.queued == ()
    # A cancel while reading: the turn ends canceled, nothing is read any more.
    canceled = transition(state, Cancel())
    assert isinstance(canceled.command, Canceled)
    assert canceled.state.committed == replace(c, **at(c, 2), status=Status.CANCELED, waiting=None)
    late = transition(canceled.state, DefinitionsRead(files=(GOOD_FILE,)))
    assert late.ignored is Ignored.NOT_AWAITED


def test_a_start_whose_tools_need_no_file_calls_the_model_at_once() -> None:
    ctx = TurnContext(mcp_servers=(server(OWN),))
    t = transition(RuntimeState.new(CID), start("hi", ctx))
    assert isinstance(t.command, CallLLM)
    assert t.state.committed.definitions == () and t.state.committed.context == ctx


def test_a_refused_first_call_after_the_reads_leaves_the_turn_unbegun() -> None:
    """Admission refuses the turn's first model call, which waited on the definition files:
    as for a run request refused at once, the turn does not begin (its opening leaves the
    view, the log keeps it) and the run fails with the limit's error."""
    before = finished(
        transition(
            reading((BROKEN, GOOD))[0], DefinitionsRead(files=(GOOD_FILE, BROKEN_FILE))
        ).state
    )
    t = transition(before, start("over the budget", CTX))
    assert isinstance(t.command, ReadDefinitions)
    opened = t.state
    planned = transition(opened, DefinitionsRead(files=(GOOD_FILE, BROKEN_FILE)))
    assert isinstance(planned.command, CallLLM)
    refusal = CallRefused(call_id=planned.command.call_id, limit=Limit.BUDGET, message="over")
    out = admit(opened, planned, refusal)
    assert isinstance(out.command, Failed) and out.command.limit is Limit.BUDGET
    c, b = out.state.committed, before.committed
    assert c.messages == b.messages  # the history the model sees is as before the turn
    assert c.log == (*b.log, user("over the budget"))  # the opening stays in the log
    assert c.turn_starts == b.turn_starts and c.status == Status.FAILED
    assert c.definitions == (BROKEN_FILE, GOOD_FILE)
    # The client sends the same message again: it opens the turn once, in the view.
    again = transition(out.state, start("over the budget", CTX))
    assert isinstance(again.command, ReadDefinitions)
    assert again.state.committed.messages == (*b.messages, user("over the budget"))
