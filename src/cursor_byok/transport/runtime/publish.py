"""What a run sends for each transition: the frames of the events it emitted, the cards of
the calls the loop answered itself, the news of a compaction (with its log line and count), and
a window the provider reported (kept for the process, warned about once per model).

The run hands the transition over after its commit (or with no commit, for pending-only
changes); nothing here decides: it encodes what the loop already chose to show, and the
mid-turn checkpoint the loop asked for (`Transition.checkpoint`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ...llm.models import Model
from ...loop import Compacted, Input, LLMEvent, Transition
from ..connect.channel import RunChannel
from ..cursor import (
    ClientLink,
    StreamEncoder,
    summary_completed,
    summary_started,
    summary_text,
)
from ..cursor.encode import server_notice
from .checkpoints import Checkpoints
from .provider_windows import ProviderWindows
from .summaries import HOOK_MESSAGE, NOTHING_TO_COMPACT
from .summary import CompactionSummary

log = logging.getLogger("cursor_byok.runtime")


class Publisher:
    """A run's frames out: one stream encoder per model call, the local cards, compactions."""

    def __init__(
        self,
        channel: RunChannel,
        link: ClientLink,
        now_ms: Callable[[], int],
        on_compaction: Callable[[CompactionSummary], None] | None,
        windows: ProviderWindows | None = None,
    ) -> None:
        """`windows`: the process's memory of provider-reported windows, which keeps what
        the loop reports (`Transition.window_report`) and warns once per model."""
        self.channel = channel
        self.link = link
        self.now_ms = now_ms
        self.on_compaction = on_compaction
        self.windows = windows
        self.model: Model | None = None  # the run's model, once its run request named it
        self.checkpoints: Checkpoints | None = None  # the run's, once its run request came
        self._encoders: dict[str, StreamEncoder] = {}

    def publish(self, t: Transition, input: Input) -> None:
        """Send what the transition emitted, and the cards of the calls it answered itself."""
        send = self.channel.send
        for notice in t.notices:
            send(server_notice(notice))
        if t.emit and isinstance(input, LLMEvent):
            encoder = self._encoders.get(input.call_id)
            if encoder is not None:
                for event in t.emit:
                    frame = encoder.encode(event)
                    if frame is not None:
                        send(frame)
        if t.compacted is not None:
            self.compacted(t.compacted)
        if t.checkpoint is not None and self.checkpoints is not None:
            # A model call changed the history: the IDE's meter and turn list move now.
            self.checkpoints.mid_turn(t.state.committed, t.checkpoint.pending_tool_calls)
        report = t.window_report
        if report is not None and self.windows is not None and self.model is not None:
            self.windows.report(self.model.id, self.model.context_window, report)
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

    def compacted(self, done: Compacted) -> None:
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
            self.link.conversation_id,
            done.reason,
            self.model.id,
            done.summarized,
            done.kept,
            done.tokens_before,
            done.tokens_after,
        )
        hook = self.on_compaction
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

    def encoder(self, call_id: str) -> StreamEncoder:
        """The stream encoder of model call `call_id` (made at its first use)."""
        encoder = self._encoders.get(call_id)
        if encoder is None:
            encoder = StreamEncoder(model_call_id=call_id, now_ms=self.now_ms)
            self._encoders[call_id] = encoder
        return encoder
