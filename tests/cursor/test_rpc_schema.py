"""Our schema against the newest public one (tests/support/public_schema.py): every RPC we
answer is declared with the public input and output messages, every field we declare has the
public number, name and type, and every such RPC has a handler."""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from cursor_byok.transport.cursor.proto import agent_pb2, aiserver_pb2
from cursor_byok.transport.cursor.rpc import UNARY_METHODS
from tests.support.public_schema import schema

F = descriptor_pb2.FieldDescriptorProto
_KINDS = {
    F.TYPE_STRING: "string",
    F.TYPE_BYTES: "bytes",
    F.TYPE_BOOL: "bool",
    F.TYPE_INT32: "int32",
    F.TYPE_INT64: "int64",
    F.TYPE_UINT32: "uint32",
    F.TYPE_UINT64: "uint64",
    F.TYPE_DOUBLE: "double",
    F.TYPE_ENUM: "enum",
    F.TYPE_MESSAGE: "message",
}


def _ours() -> dict[str, object]:
    methods = {}
    for module in (agent_pb2, aiserver_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for m in service.methods:
                methods[f"/{service.full_name}/{m.name}"] = m
    return methods


def test_every_public_rpc_we_answer_has_the_public_messages_and_a_handler() -> None:
    ours = _ours()
    public = schema()["methods"]
    for path, method in public.items():
        assert path in ours, f"{path} is not declared in our .proto"
        declared = ours[path]
        assert declared.input_type.full_name == method["input"], path  # type: ignore[attr-defined]
        assert declared.output_type.full_name == method["output"], path  # type: ignore[attr-defined]
        if path != "/aiserver.v1.BidiService/BidiAppend":  # the app handles the shim itself
            assert path in UNARY_METHODS, f"{path} has no handler"


def test_every_field_we_declare_has_the_public_number_name_and_type() -> None:
    public = schema()["messages"]
    checked = 0
    for full_name, fields in public.items():
        package, name = full_name.rsplit(".", 1)
        module = agent_pb2 if package == "agent.v1" else aiserver_pb2
        ours = module.DESCRIPTOR.message_types_by_name.get(name)
        assert ours is not None, f"{full_name} is not declared"
        by_number = {f[0]: f for f in fields}
        for field in ours.fields:
            assert field.number in by_number, f"{full_name}.{field.name} ({field.number})"
            _, public_name, kind, label, *_ = by_number[field.number]
            assert field.name == public_name, (full_name, field.number)
            is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
            assert ("map" if is_map else _KINDS[field.type]) == kind, (full_name, field.name)
            repeated = field.is_repeated and not is_map
            assert repeated == (label == "repeated"), (full_name, field.name)
            checked += 1
    assert checked > 60
