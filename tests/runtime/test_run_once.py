"""What a run makes once: the provider's prompt-cache key its model calls and its summary calls
carry (a hash of the conversation id), the starting state of its conversation."""

from __future__ import annotations

from pathlib import Path

import pytest

from cursor_byok.loop import RuntimeState
from cursor_byok.transport.runtime import calls, run_parts
from cursor_byok.transport.runtime.conversation import UNNAMED
from cursor_byok.transport.runtime.request_bases import RequestBases
from cursor_byok.transport.runtime.summaries import SummaryCalls
from tests.runtime.harness import MODEL, Client, open_server, run_request


async def test_a_run_makes_its_cache_key_once_for_all_its_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []
    real = calls.cache_key

    def counted(conversation_id: str) -> str:
        made.append(conversation_id)
        return real(conversation_id)

    monkeypatch.setattr(calls, "cache_key", counted)
    monkeypatch.setattr(run_parts, "cache_key", counted)
    server = await open_server(tmp_path / "db", ["Hello there"])
    client = Client("r1")
    client.say(run_request("c1", "hi"))
    server.start(client)
    assert await client.ended() is None
    assert made == ["c1"]
    assert [c.settings.cache_key for c in server.llm.calls] == [real("c1")]


def test_model_and_summary_calls_send_the_key_they_are_given() -> None:
    async def nothing(*_: object) -> None:
        return None

    key = calls.cache_key("c9")
    model_calls = calls.ModelCalls(
        model=MODEL,
        llm=None,  # type: ignore[arg-type]
        store=None,  # type: ignore[arg-type]
        bases=RequestBases(),
        conversation_id="c9",
        on_event=nothing,
        prompt_cache_key=key,
    )
    summaries = SummaryCalls(
        summarizer=MODEL,
        llm=None,  # type: ignore[arg-type]
        store=None,  # type: ignore[arg-type]
        conversation_id="c9",
        summary_output=100,
        deliver=nothing,
        prompt_cache_key=key,
    )
    assert model_calls.target("any").settings.cache_key == key
    assert summaries._calls.target("any").settings.cache_key == key
    alone = calls.ModelCalls(
        model=MODEL,
        llm=None,  # type: ignore[arg-type]
        store=None,  # type: ignore[arg-type]
        bases=RequestBases(),
        conversation_id="c9",
        on_event=nothing,
    )
    assert alone.target("any").settings.cache_key == key  # made when not given


async def test_a_run_builds_the_starting_state_of_its_conversation_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before its run request names the conversation a run holds the one shared unnamed
    state: the only state built is the new conversation's."""
    built: list[str] = []
    real = RuntimeState.new.__func__  # type: ignore[attr-defined]

    def counted(cls: type[RuntimeState], conversation_id: str) -> RuntimeState:
        built.append(conversation_id)
        return real(cls, conversation_id)  # type: ignore[no-any-return]

    monkeypatch.setattr(RuntimeState, "new", classmethod(counted))
    server = await open_server(tmp_path / "db", ["Hello there"])
    client = Client("r1")
    client.say(run_request("c1", "hi"))
    server.start(client)
    assert await client.ended() is None
    assert built == ["c1"]
    assert real(RuntimeState, "") == UNNAMED
