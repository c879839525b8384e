"""What a tool of the catalogue is (`ToolSpec`) and the JSON Schema pieces its parameters are
written with; tools.py and tools_web.py hold the tools themselves."""

from __future__ import annotations

from typing import Any

import msgspec

from cursor_byok.llm.types import ToolDefinition

__all__ = ["ToolSpec", "object_schema", "string_schema"]


class ToolSpec(msgspec.Struct, frozen=True):
    name: str
    description: str
    parameters: dict[str, Any]
    side_effects: bool

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name, description=self.description, parameters=self.parameters
        )


def object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def string_schema(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}
