"""`doctor`'s window rows: each model on a local server (llama.cpp, Ollama) against the window
that server really serves it with (llm/local_servers.py).

A configured `context_window` larger than what the server serves is refused at the provider
once the conversation grows past it (the server then compacts to the reported window, with a
WARNING); a smaller one wastes room and compacts early. Both are a WARN with the value to set.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from .config import Config, Model
from .llm.local_servers import ServedContext, is_local, served_context

Row = tuple[str, Literal["OK", "WARN", "SKIP"], str, str]  # check, status, detail, next step


def _row(model: Model, served: ServedContext | None) -> Row:
    name = f"window {model.id}"
    configured = model.context_window
    if served is None:
        return (name, "SKIP", "the server exposes no context size (llama.cpp /props, Ollama)", "")
    where = f"{served.server} serves {served.tokens:,} tokens ({served.source})"
    if not served.exact:
        detail = f"{where}, the model's maximum; Ollama may serve less (num_ctx)"
        if configured > served.tokens:
            step = f"set context_window = {served.tokens} (or less: the num_ctx Ollama runs with)"
            return (name, "WARN", f"{detail}; context_window is {configured:,}", step)
        return (name, "OK", f"{detail}; context_window is {configured:,}", "")
    if configured == served.tokens:
        return (name, "OK", f"{where}, as context_window says", "")
    if configured > served.tokens:
        detail = (
            f"{where}, less than context_window {configured:,}: requests past it are refused "
            "(then compacted to fit, with a WARNING)"
        )
    else:
        detail = f"{where}, more than context_window {configured:,}: conversations compact early"
    step = f"set context_window = {served.tokens} for [models.{model.id}]"
    return (name, "WARN", detail, step)


async def local_window_rows(config: Config, timeout_s: float = 3.0) -> list[Row]:
    """One row per model whose provider is a local OpenAI-compatible server."""
    models = [
        m
        for m in config.models.values()
        if m.provider.api == "openai-chat" and is_local(m.provider.base_url)
    ]
    found = await asyncio.gather(
        *(served_context(m.provider.base_url, m.settings.model, timeout_s) for m in models)
    )
    return [_row(model, served) for model, served in zip(models, found, strict=True)]


__all__ = ["local_window_rows"]
