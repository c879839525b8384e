"""The context windows providers reported, per model, for the life of this process.

When a provider refuses a request as too long and says how big its window is, the loop
compacts to fit it and reports it (`WindowReport`); every later run of that model in this
process starts from that window (`ContextWindow.provider_tokens`), so it is not refused again
first. Nothing here is written to the configuration or the store: a restarted process learns
it again, and the operator fixes `context_window` from the WARNING, logged once per model
(and once more for a silent overflow: a success whose usage passed the window).
"""

from __future__ import annotations

import logging

from ...loop import WindowReport

log = logging.getLogger("cursor_byok.runtime")


class ProviderWindows:
    """The smallest window each model's provider reported (by model id), and which models
    were warned about (once for a refusal's window, once for a silent overflow)."""

    def __init__(self) -> None:
        self._tokens: dict[str, int] = {}
        self._warned: set[tuple[str, bool]] = set()  # (model id, a refusal's window)

    def tokens(self, model_id: str) -> int:
        """The window `model_id`'s provider reported; 0: none."""
        return self._tokens.get(model_id, 0)

    def report(self, model_id: str, configured: int, report: WindowReport) -> None:
        """Keep what a run's loop reported for `model_id`; warn the first time per model."""
        if report.tokens > 0:
            known = self._tokens.get(model_id, 0)
            if known == 0 or report.tokens < known:
                self._tokens[model_id] = report.tokens
        key = (model_id, report.tokens > 0)  # a silent overflow never hides a refusal's window
        if key in self._warned:
            return
        self._warned.add(key)
        if report.tokens > 0:
            log.warning(
                "model %s: the provider refused a request as too long and reported a context "
                "window of %d tokens (context_window is %d): this process compacts to fit %d "
                "from now on; set context_window = %d to keep it. The provider said: %s",
                model_id,
                report.tokens,
                configured,
                report.tokens,
                report.tokens,
                report.said,
            )
        else:
            log.warning(
                "model %s: %s (context_window is %d): the next request is compacted first; "
                "the provider may have cut the request, or its real window differs, so check "
                "context_window",
                model_id,
                report.said,
                configured,
            )


__all__ = ["ProviderWindows"]
