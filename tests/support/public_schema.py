"""The newest public Cursor schema we hold, as protobuf classes built at test time.

tests/fixtures/cursor/public-schema.json records facts read from the message descriptors
embedded in @cursor/sdk 1.0.32 (npm), and for the IDE's AiService (which the SDK does not
carry) from the newest extraction of the IDE's bundle we found (its `sources` say which): for
each RPC we answer, its input and output message, and each message's fields (number, name,
type, label). `decode` parses a response with those
messages, in a descriptor pool of its own, so a test sees what a client built on that schema
sees: a field number we send that the schema does not have shows up as an unknown field.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cursor" / "public-schema.json"
F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "double": F.TYPE_DOUBLE,
    "float": F.TYPE_FLOAT,
    "int64": F.TYPE_INT64,
    "uint64": F.TYPE_UINT64,
    "int32": F.TYPE_INT32,
    "bool": F.TYPE_BOOL,
    "string": F.TYPE_STRING,
    "bytes": F.TYPE_BYTES,
    "uint32": F.TYPE_UINT32,
    "fixed64": F.TYPE_FIXED64,
    "fixed32": F.TYPE_FIXED32,
    "sint32": F.TYPE_SINT32,
    "sint64": F.TYPE_SINT64,
    "sfixed32": F.TYPE_SFIXED32,
    "sfixed64": F.TYPE_SFIXED64,
    "enum": F.TYPE_INT64,  # an enum's number, whatever its name
    "map": F.TYPE_BYTES,  # one entry per occurrence, length-delimited
}


@cache
def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    return data


@cache
def _pool() -> descriptor_pool.DescriptorPool:
    messages: dict[str, list[list[Any]]] = schema()["messages"]
    pool = descriptor_pool.DescriptorPool()
    for package in sorted({name.rsplit(".", 1)[0] for name in messages}):
        file = descriptor_pb2.FileDescriptorProto(
            name=f"public/{package}.proto", package=package, syntax="proto3"
        )
        for full, fields in messages.items():
            if full.rsplit(".", 1)[0] != package:
                continue
            msg = file.message_type.add(name=full.rsplit(".", 1)[1])
            for number, name, kind, label, *ref in fields:
                field = msg.field.add(name=name, number=number, json_name=name)
                field.label = F.LABEL_REPEATED if label == "repeated" else F.LABEL_OPTIONAL
                target = f"{package}.{ref[0]}" if ref else ""
                if kind == "message" and target in messages:
                    field.type = F.TYPE_MESSAGE
                    field.type_name = "." + target
                elif kind == "message":
                    field.type = F.TYPE_BYTES  # a message the fixture does not spell out
                else:
                    field.type = _SCALARS[kind]
        pool.Add(file)
    return pool


def message_class(full_name: str) -> type[Message]:
    cls: type[Message] = message_factory.GetMessageClass(_pool().FindMessageTypeByName(full_name))
    return cls


def unknown_fields(message: Message, path: str = "") -> list[str]:
    """Every field (dotted path and number) of `message` the public schema does not have."""
    found = [f"{path}#{f.field_number}" for f in UnknownFieldSet(message)]
    for descriptor, value in message.ListFields():
        if descriptor.type != F.TYPE_MESSAGE:
            continue
        values = value if descriptor.is_repeated else [value]
        for i, sub in enumerate(values):
            found += unknown_fields(sub, f"{path}.{descriptor.name}[{i}]")
    return found


def decode(path: str, body: bytes) -> Message:
    """The response of RPC `path`, decoded with the public schema's output message; fails
    when it carries a field that schema does not know."""
    method = schema()["methods"][path]
    message = message_class(method["output"]).FromString(body)
    assert unknown_fields(message) == [], (path, unknown_fields(message))
    return message


def request_type(path: str) -> type[Message]:
    return message_class(schema()["methods"][path]["input"])


__all__ = ["decode", "message_class", "request_type", "schema", "unknown_fields"]
