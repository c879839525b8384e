"""docs/rpcs.md is true: its "Answered" table is exactly the RPCs this server answers, with the
kind of answer each gets, every RPC our .proto declares is listed, and no RPC listed as
unimplemented on purpose has a handler."""

from __future__ import annotations

import re
from pathlib import Path

from cursor_byok.transport.cursor.proto import agent_pb2, aiserver_pb2
from cursor_byok.transport.cursor.rpc import UNARY_METHODS
from cursor_byok.transport.cursor.service import CursorService
from tests.support.public_schema import schema

DOC = Path(__file__).resolve().parents[2] / "docs" / "rpcs.md"
STREAMS = {CursorService.run_path, CursorService.runsse_path, CursorService.append_path}


def _doc() -> tuple[dict[str, str], set[str]]:
    text = DOC.read_text()
    answered = dict(re.findall(r"^\| `(/[\w.]+/\w+)` \| (\w+) \|", text, re.M))
    unimplemented: set[str] = set()
    rest = text.split("## Unimplemented on purpose", 1)[1]
    for service, names in re.findall(r"^### `([\w.]+)`: [^\n]*\n\n([^\n]+)", rest, re.M):
        unimplemented |= {f"/{service}/{n}" for n in re.findall(r"`(\w+)`", names)}
    return answered, unimplemented


def test_the_answered_table_is_what_the_server_answers() -> None:
    answered, _ = _doc()
    assert set(answered) == set(UNARY_METHODS) | STREAMS
    for path, kind in answered.items():
        assert kind in ("served", "empty", "dropped"), (path, kind)
        if path in UNARY_METHODS:
            assert (kind == "dropped") == UNARY_METHODS[path].dropped, path


def test_every_rpc_we_declare_or_the_public_schema_answers_is_listed() -> None:
    answered, unimplemented = _doc()
    assert not set(answered) & unimplemented
    assert not set(UNARY_METHODS) & unimplemented
    declared = {
        f"/{service.full_name}/{m.name}"
        for module in (agent_pb2, aiserver_pb2)
        for service in module.DESCRIPTOR.services_by_name.values()
        for m in service.methods
    }
    assert declared <= set(answered) | unimplemented
    assert set(schema()["methods"]) <= set(answered)
    assert len(unimplemented) > 1000  # the public schemas' whole surface
