"""Executing the loop's ReadDefinitions (loop/definitions.py decides which MCP definition files
a turn needs, keeps what they said and offers the tools): each file read through the client at
once, with one deadline, each answer made the loop's `DefinitionFile` by the dialect, and one
DefinitionsRead fed back. A failed read is logged once per file per process.
"""

from __future__ import annotations

import logging

from ...loop import DefinitionFile, DefinitionsRead, ReadDefinitions
from ..cursor import definition_file
from .requests import ClientRequests

log = logging.getLogger("cursor_byok.runtime")

_LOGGED: set[str] = set()  # definition files whose failed read this process has logged


async def read_definitions(command: ReadDefinitions, requests: ClientRequests) -> DefinitionsRead:
    """The loop's input for `command`: what the client's read of each file gave."""
    answers = await requests.definitions(command.paths)
    files: list[DefinitionFile] = []
    for path in command.paths:
        answer = answers[path]
        file = definition_file(path, answer.text, answer.error)
        if file.error and path not in _LOGGED:
            _LOGGED.add(path)
            log.warning("the MCP tool definition %s could not be read: %s", path, file.error)
        files.append(file)
    return DefinitionsRead(files=tuple(files))


__all__ = ["read_definitions"]
