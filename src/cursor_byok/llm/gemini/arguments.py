"""Gemini's streamed function-call arguments: `partialArgs` fragments addressed by JSON path
(`willContinue` for a string cut in parts) are assembled into the arguments object, and each
fragment is also re-emitted as incremental JSON text (`ArgumentsWriter`)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import msgspec

from .request import Json

_encoder = msgspec.json.Encoder()

PathMember: TypeAlias = str | int
JsonPath: TypeAlias = tuple[PathMember, ...]

_PATH_TOKEN = re.compile(
    r"\.([^.\[\]]+)|\[(\d+)\]|\['((?:[^'\\]|\\.)*)'\]|\[\"((?:[^\"\\]|\\.)*)\"\]"
)
_ESCAPE = re.compile(r"\\(.)")


class PathError(ValueError):
    pass


@functools.lru_cache(maxsize=4096)
def parse_json_path(text: str) -> JsonPath:
    """The RFC 9535 subset Gemini uses for `partialArgs`: `$`, `.name`, `[n]`, `['name']`."""
    if not text.startswith("$"):
        raise PathError(f"JSON path must start with $: {text!r}")
    out: list[PathMember] = []
    pos = 1
    while pos < len(text):
        match = _PATH_TOKEN.match(text, pos)
        if match is None:
            raise PathError(f"unsupported JSON path: {text!r}")
        name, index, single, double = match.groups()
        if name is not None:
            out.append(name)
        elif index is not None:
            out.append(int(index))
        else:
            out.append(_ESCAPE.sub(r"\1", single if single is not None else double))
        pos = match.end()
    if not out:
        raise PathError("JSON path $ does not name an argument")
    return tuple(out)


def _merged(old: Any, value: Any, append: bool) -> Any:
    return old + value if append and isinstance(old, str) else value


def _child(old: Any, next_member: PathMember, path: JsonPath) -> Any:
    want: type = dict if isinstance(next_member, str) else list
    if old is None:
        return want()
    if not isinstance(old, want):
        raise PathError(f"conflicting value types at {path!r}")
    return old


def assign_path(root: Json, path: JsonPath, value: Any, *, append: bool) -> None:
    """Set `value` at `path` inside `root`, creating objects and arrays on the way. With
    `append`, a string value extends the string already there (a continued fragment)."""
    node: Any = root
    last = len(path) - 1
    for depth, member in enumerate(path):
        if isinstance(member, str):
            if not isinstance(node, dict):
                raise PathError(f"{member!r} used as a key of a non-object")
            if depth == last:
                node[member] = _merged(node.get(member), value, append)
                return
            child = node[member] = _child(node.get(member), path[depth + 1], path)
        else:
            if not isinstance(node, list):
                raise PathError(f"[{member}] used as an index of a non-array")
            while len(node) <= member:
                node.append(None)
            if depth == last:
                node[member] = _merged(node[member], value, append)
                return
            child = node[member] = _child(node[member], path[depth + 1], path)
        node = child


@dataclass(slots=True)
class _Frame:
    is_object: bool
    count: int = 0
    keys: set[str] = field(default_factory=set)


class ArgumentsWriter:
    """Incremental JSON text of an arguments object streamed as path fragments.

    While fragments arrive in document order (as Gemini sends them), the concatenated output is
    exactly the JSON of the assembled object. A fragment that goes back to an earlier place
    cannot be written incrementally: the writer then falls silent, and only the assembled object
    (which is always the final arguments) is authoritative.
    """

    __slots__ = ("_frames", "_path", "_string_open", "broken", "started")

    def __init__(self) -> None:
        self._frames: list[_Frame] = [_Frame(is_object=True)]
        self._path: JsonPath = ()
        self._string_open = False
        self.broken = False
        self.started = False

    def feed(self, path: JsonPath, value: Any, *, is_string: bool, more: bool) -> str:
        if self.broken:
            return ""
        if self._string_open and is_string and path == self._path:
            text = _encoder.encode(value).decode()[1:-1]
            if not more:
                self._string_open = False
                return text + '"'
            return text
        common = 0
        for a, b in zip(self._path, path, strict=False):
            if a != b or type(a) is not type(b):
                break
            common += 1
        if self._path and (common >= len(path) or common >= len(self._path)):
            self.broken = True
            return ""
        frame = self._frames[common] if common < len(self._frames) else None
        member = path[common]
        if frame is None or not self._fits(frame, member):
            self.broken = True
            return ""
        for m in path[common + 1 :]:
            if isinstance(m, int) and m != 0:  # a new array must start at index 0
                self.broken = True
                return ""
        out: list[str] = []
        if self._string_open:
            out.append('"')
            self._string_open = False
        if not self.started:
            out.append("{")
            self.started = True
        while len(self._frames) > common + 1:
            out.append("}" if self._frames.pop().is_object else "]")
        self._add_member(frame, member, out)
        for m in path[common + 1 :]:
            child = _Frame(is_object=isinstance(m, str))
            out.append("{" if child.is_object else "[")
            self._frames.append(child)
            self._add_member(child, m, out)
        if is_string:
            text = _encoder.encode(value).decode()
            if more:
                text = text[:-1]
                self._string_open = True
            out.append(text)
        else:
            out.append(_encoder.encode(value).decode())
        self._path = path
        return "".join(out)

    def close(self) -> str:
        """The text that completes the object (`{}` when nothing was written)."""
        if self.broken:
            return ""
        if not self.started:
            return "{}"
        out = ['"'] if self._string_open else []
        while self._frames:
            out.append("}" if self._frames.pop().is_object else "]")
        return "".join(out)

    @staticmethod
    def _fits(frame: _Frame, member: PathMember) -> bool:
        if frame.is_object:
            return isinstance(member, str) and member not in frame.keys
        return isinstance(member, int) and member == frame.count

    @staticmethod
    def _add_member(frame: _Frame, member: PathMember, out: list[str]) -> None:
        if frame.count:
            out.append(",")
        if frame.is_object:
            assert isinstance(member, str)
            out.append(_encoder.encode(member).decode() + ":")
            frame.keys.add(member)
        frame.count += 1
