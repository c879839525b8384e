"""The process's memory of provider windows (transport/runtime/provider_windows.py): the
smallest window per model, one WARNING per model for a refusal's window and one for a silent
overflow, the provider's text quoted."""

from __future__ import annotations

import logging

import pytest

from cursor_byok.loop import WindowReport
from cursor_byok.transport.runtime.provider_windows import ProviderWindows

SAID = "llama HTTP 400: request (8850 tokens) exceeds the available context size (8192 tokens)"


def test_the_smallest_window_is_kept_per_model_and_each_kind_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="cursor_byok.runtime")
    windows = ProviderWindows()
    silent = WindowReport(said="usage 9,000 over 8,192", used=9000, window=8192)
    windows.report("a", 128_000, silent)
    windows.report("a", 128_000, silent)
    assert windows.tokens("a") == 0  # a silent overflow reports no window
    windows.report("a", 128_000, WindowReport(said=SAID, tokens=8192, window=128_000))
    windows.report("a", 128_000, WindowReport(said="later", tokens=16384, window=8192))
    windows.report("a", 128_000, WindowReport(said="smaller", tokens=4096, window=8192))
    windows.report("b", 32_000, WindowReport(said=SAID, tokens=8192, window=32_000))
    assert (windows.tokens("a"), windows.tokens("b"), windows.tokens("c")) == (4096, 8192, 0)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3, said  # a: silent, a: refused, b: refused
    assert "usage 9,000 over 8,192" in said[0] and "model a" in said[0]
    assert SAID in said[1] and "set context_window = 8192" in said[1]
    assert "model b" in said[2]
