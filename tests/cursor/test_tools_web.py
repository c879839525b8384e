"""WebFetch and GenerateImage on the dialect's side: an approval query under an interaction
id, then an exec under an exec id (each from its own id space, each routed back to the call),
a server job in between for GenerateImage, and the abort of what is out."""

from __future__ import annotations

from typing import Any

from cursor_byok.llm.types import ToolCall
from cursor_byok.transport.cursor import ClientLink, Stray, ToolFinished, ToolProgress
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.tools.web import image_file_name
from cursor_byok.web.types import (
    ImageJob,
    ImageMade,
    JobFailed,
    PageFetched,
    PageFetchJob,
    PageTextJob,
)
from tests.support.images import PNG

URL = "https://example.org/a"


def link(page_text_chars: int = 100_000) -> ClientLink:
    return ClientLink(conversation_id="c", now_ms=lambda: 5, page_text_chars=page_text_chars)


def start(lk: ClientLink, tool: str, **args: Any) -> tuple[a.InteractionQuery | None, Any]:
    call = ToolCall(id="call_1", name=tool, arguments=dict(args))
    started = lk.start_tool(
        "op", call, llm_call_id="m1", content_index=0, workspace_root="/w/proj/"
    )
    if started.early is not None:
        return None, started.early
    first, query = (a.AgentServerMessage.FromString(f) for f in started.frames)
    assert first.interaction_update.WhichOneof("message") == "tool_call_started"
    return query.interaction_query, None


def respond(query_id: int, **variant: Any) -> a.AgentClientMessage:
    return a.AgentClientMessage(interaction_response=a.InteractionResponse(id=query_id, **variant))


def exec_reply(exec_id: int, **oneof: Any) -> a.AgentClientMessage:
    return a.AgentClientMessage(exec_client_message=a.ExecClientMessage(id=exec_id, **oneof))


def sent(step: Any) -> a.ExecServerMessage:
    assert isinstance(step, ToolProgress), step
    (frame,) = step.frames
    return a.AgentServerMessage.FromString(frame).exec_server_message


def card(done: Any) -> a.ToolCall:
    assert isinstance(done, ToolFinished), done
    msg = a.AgentServerMessage.FromString(done.card)
    return msg.interaction_update.tool_call_completed.tool_call


APPROVE_FETCH = a.WebFetchRequestResponse(approved=a.WebFetchRequestResponse.Approved())


def approved_fetch(lk: ClientLink, **args: Any) -> tuple[int, a.ExecServerMessage]:
    query, _ = start(lk, "WebFetch", url=URL, **args)
    assert query is not None
    progress = lk.receive(respond(query.id, web_fetch_request_response=APPROVE_FETCH))
    return query.id, sent(progress)


def test_the_fetch_exec_after_the_approval_takes_an_exec_id_and_its_reply_comes_back() -> None:
    lk = link()
    assert lk.next_interaction_id() == 1  # one the runtime asked itself
    query_id, fetch = approved_fetch(lk)
    assert query_id == 2
    # The exec's id comes from the exec ids (none used yet), not from the interaction ids.
    assert fetch.id == 1 and fetch.WhichOneof("message") == "fetch_args"
    assert fetch.fetch_args == a.FetchArgs(url=URL, tool_call_id="call_1")
    # A second answer to the query changes nothing.
    late = lk.receive(respond(query_id, web_fetch_request_response=APPROVE_FETCH))
    assert isinstance(late, Stray) and "no longer waits on its query" in late.detail
    ok = a.FetchSuccess(url=URL, content="plain words", status_code=200, content_type="text/plain")
    done = lk.receive(exec_reply(1, fetch_result=a.FetchResult(success=ok)))
    assert isinstance(done, ToolFinished) and not done.result.is_error
    assert done.result.text == f"Fetched {URL} (HTTP 200, text/plain).\n\nplain words"
    assert card(done).web_fetch_tool_call.result.success == a.WebFetchSuccess(
        url=URL, markdown="plain words"
    )
    assert not lk.tool_running("op")


def test_an_html_page_the_client_fetched_is_converted_by_a_server_job() -> None:
    """HTML to text runs in the server's worker processes, never in the machine (on the loop):
    the machine asks for a `PageTextJob` and finishes with its outcome."""
    lk = link()
    _, fetch = approved_fetch(lk)
    html = "<h1>Title</h1><p>Body</p>"
    ok = a.FetchSuccess(url=URL, content=html, status_code=200, content_type="text/html")
    step = lk.receive(exec_reply(fetch.id, fetch_result=a.FetchResult(success=ok)))
    assert isinstance(step, ToolProgress) and step.frames == ()
    assert step.job == PageTextJob(url=URL, status=200, content_type="text/html", content=html)
    page = PageFetched(url=URL, status=200, content_type="text/html", text="# Title\n\nBody")
    done = lk.deliver_job("op", page)
    assert isinstance(done, ToolFinished) and not done.result.is_error
    assert done.result.text == f"Fetched {URL} (HTTP 200, text/html).\n\n# Title\n\nBody"


def test_a_page_the_server_could_not_convert_is_an_error_result_saying_why() -> None:
    lk = link()
    _, fetch = approved_fetch(lk)
    ok = a.FetchSuccess(url=URL, content="<div>" * 9, status_code=200, content_type="text/html")
    step = lk.receive(exec_reply(fetch.id, fetch_result=a.FetchResult(success=ok)))
    assert isinstance(step, ToolProgress) and isinstance(step.job, PageTextJob)
    done = lk.deliver_job("op", JobFailed(message="converting the page took too long"))
    assert isinstance(done, ToolFinished) and done.result.is_error
    assert done.result.text == (
        f"Error: {URL} was fetched, but its text could not be read: converting the page took "
        "too long"
    )


def test_an_error_status_is_an_error_result_with_the_page() -> None:
    lk = link()
    _, fetch = approved_fetch(lk)
    ok = a.FetchSuccess(url=URL, content="<p>Gone</p>", status_code=404, content_type="text/html")
    step = lk.receive(exec_reply(fetch.id, fetch_result=a.FetchResult(success=ok)))
    assert isinstance(step, ToolProgress) and isinstance(step.job, PageTextJob)
    page = PageFetched(url=URL, status=404, content_type="text/html", text="Gone")
    done = lk.deliver_job("op", page)
    assert isinstance(done, ToolFinished) and done.result.is_error
    assert done.result.text == (
        f"Fetched {URL} (HTTP 404, text/html). The server answered with an error status 404."
        "\n\nGone"
    )


def test_the_page_text_limit_comes_from_the_link() -> None:
    lk = link(page_text_chars=1000)
    _, fetch = approved_fetch(lk)
    ok = a.FetchSuccess(url=URL, content="w " * 2000, status_code=200, content_type="text/plain")
    done = lk.receive(exec_reply(fetch.id, fetch_result=a.FetchResult(success=ok)))
    assert isinstance(done, ToolFinished)
    assert "(the limit is 1000).]" in done.result.text


def test_abort_before_the_approval_sends_nothing_and_after_it_aborts_the_fetch() -> None:
    lk = link()
    start(lk, "WebFetch", url=URL)
    assert lk.abort_tool("op") == ()
    lk = link()
    _, fetch = approved_fetch(lk)
    (frame,) = lk.abort_tool("op")
    abort = a.AgentServerMessage.FromString(frame).exec_server_control_message.abort
    assert abort.id == fetch.id
    assert not lk.tool_running("op")


def test_a_client_that_cannot_fetch_hands_the_page_to_the_server() -> None:
    lk = link()
    _, fetch = approved_fetch(lk)
    error = a.FetchResult(error=a.FetchError(url=URL, error="Not implemented"))
    step = lk.receive(exec_reply(fetch.id, fetch_result=error))
    assert isinstance(step, ToolProgress) and step.job == PageFetchJob(url=URL)
    assert step.frames == ()
    page = PageFetched(url=URL, status=200, content_type="text/html", text="# Cleaned")
    done = lk.deliver_job("op", page)
    assert isinstance(done, ToolFinished) and not done.result.is_error
    # The server's text is already cleaned: it is not parsed as HTML again.
    assert done.result.text == f"Fetched {URL} (HTTP 200, text/html).\n\n# Cleaned"


def test_urls_the_tool_does_not_fetch_are_early_errors() -> None:
    for url in ("ftp://example.org/x", "example.org", "https://"):
        query, early = start(link(), "WebFetch", url=url)
        assert query is None and early.result.is_error
        assert (
            early.result.text == f"Error: WebFetch needs an http:// or https:// URL, not {url!r}."
        )


# -- GenerateImage ----------------------------------------------------------------------------


def approved_image(lk: ClientLink, edited: str = "") -> ToolProgress:
    query, _ = start(
        lk, "GenerateImage", description="a fox", filename="sub/../fox.png", aspect_ratio="9:16"
    )
    assert query is not None
    q = query.generate_image_request_query
    assert q.tool_call_id == "call_1"
    assert q.args == a.GenerateImageArgs(
        description="a fox", file_path="/w/proj/fox.png", aspect_ratio="9:16"
    )
    approved = a.GenerateImageRequestResponse(
        approved=a.GenerateImageRequestResponse.Approved(description=edited)
    )
    step = lk.receive(respond(query.id, generate_image_request_response=approved))
    assert isinstance(step, ToolProgress) and step.frames == ()
    return step


def test_generate_image_runs_the_job_then_writes_the_bytes() -> None:
    lk = link()
    step = approved_image(lk, edited="a fox, in watercolour")
    # The description the user approved (edited in the form) is the one drawn.
    assert step.job == ImageJob(description="a fox, in watercolour", aspect_ratio="9:16")
    write = sent(lk.deliver_job("op", ImageMade(data=PNG, mime_type="image/png")))
    assert write.write_args == a.WriteArgs(
        path="/w/proj/fox.png", file_bytes=PNG, tool_call_id="call_1"
    )
    ok = a.WriteResult(success=a.WriteSuccess(path="/w/proj/fox.png", file_size=len(PNG)))
    done = lk.receive(exec_reply(write.id, write_result=ok))
    assert isinstance(done, ToolFinished) and not done.result.is_error
    assert done.result.text.startswith("The image was generated and saved to /w/proj/fox.png (")
    result = card(done).generate_image_tool_call.result
    assert result.success.file_path == "/w/proj/fox.png" and result.success.image_data


def test_an_empty_approved_description_keeps_the_models() -> None:
    step = approved_image(link())
    assert step.job == ImageJob(description="a fox", aspect_ratio="9:16")


def test_a_failed_job_or_write_is_an_error_result() -> None:
    lk = link()
    approved_image(lk)
    done = lk.deliver_job("op", JobFailed(message="the image endpoint answered HTTP 429: slow"))
    assert isinstance(done, ToolFinished) and done.result.is_error
    assert done.result.text == (
        "Error: the image was not generated: the image endpoint answered HTTP 429: slow"
    )
    lk = link()
    approved_image(lk)
    write = sent(lk.deliver_job("op", ImageMade(data=PNG, mime_type="image/png")))
    denied = a.WriteResult(error=a.WriteError(path="/w/proj/fox.png", error="read-only"))
    done = lk.receive(exec_reply(write.id, write_result=denied))
    assert isinstance(done, ToolFinished) and done.result.is_error
    assert done.result.text == (
        "The image was generated but not saved. Error writing /w/proj/fox.png: read-only"
    )


def test_an_unknown_aspect_ratio_is_an_early_error() -> None:
    query, early = start(link(), "GenerateImage", description="x", aspect_ratio="2:1")
    assert query is None
    assert early.result.text == (
        "Error: aspect_ratio must be one of 1:1, 4:3, 3:4, 16:9, 9:16, not '2:1'."
    )


def test_image_file_names_stay_bare_and_safe() -> None:
    assert image_file_name("logo.png", "") == "logo.png"
    assert image_file_name("../../etc/passwd", "") == "passwd.png"
    assert image_file_name("C:\\x\\My Logo.webp", "") == "My-Logo.webp"
    assert image_file_name("", "A Red Fox, at night!") == "a-red-fox-at-night.png"
    assert image_file_name("...", "") == "image.png"


def test_a_body_the_client_fetched_that_is_not_text_is_not_shown() -> None:
    lk = link()
    _, fetch = approved_fetch(lk)
    ok = a.FetchSuccess(url=URL, content="\x89PNG...", status_code=200, content_type="image/png")
    done = lk.receive(exec_reply(fetch.id, fetch_result=a.FetchResult(success=ok)))
    assert isinstance(done, ToolFinished)
    assert done.result.text == (
        f"Fetched {URL} (HTTP 200, image/png).\n\n"
        "(The page is image/png, not text: its content is not shown.)"
    )
