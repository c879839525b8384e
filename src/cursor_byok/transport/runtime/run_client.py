"""A run's side of its client stream: the dialect's link (the ids of the run's requests to
its client), what the run asks it (requests.py), its tool calls (tools.py), where each client
message goes (routing.py) with the inbox of loop inputs, and the server jobs its tool calls run
(charges.py, charged to the run's token)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from ...loop import TurnContext
from ..connect.channel import RunChannel
from ..cursor import ClientContext, ClientLink
from .charges import JobCharges
from .requests import ClientRequests
from .routing import ClientMessages, Work
from .runner import Runner
from .tools import ToolCalls


class RunClient:
    """The client-facing pieces of one run, wired together."""

    def __init__(
        self,
        runner: Runner,
        channel: RunChannel,
        *,
        token_id: str | None,
        on_timeout: Callable[[str, int], Awaitable[None]],
        follow_up_context: Callable[[ClientContext], TurnContext],
        where: Callable[[], tuple[str, str]],
    ) -> None:
        """`where`: the run's conversation and turn, for the jobs' charges."""
        services = runner.services
        now_ms = services.now_ms
        self.inbox: asyncio.Queue[Work] = asyncio.Queue()
        self.link = ClientLink(
            conversation_id="", now_ms=now_ms, page_text_chars=services.page_text_chars
        )
        self.requests = ClientRequests(channel, self.link, services.context_timeout_s)
        self.tools = ToolCalls(
            self.link,
            timeout_s=services.tool_timeout_s,
            question_timeout_s=services.question_timeout_s,
            now_ms=now_ms,
            on_timeout=on_timeout,
        )
        jobs = services.run_job
        charges = (
            JobCharges(services, jobs, token_id=token_id, where=where) if jobs is not None else None
        )
        self.route = ClientMessages(
            channel=channel,
            link=self.link,
            requests=self.requests,
            tools=self.tools,
            inbox=self.inbox,
            now_ms=now_ms,
            follow_up_context=follow_up_context,
            unknown_event=runner.unknown_event,
            run_job=charges.run if charges is not None else None,
            job_timeout_s=services.tool_timeout_s,
        )
