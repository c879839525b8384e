"""EditNotebook: one cell of a Jupyter notebook, edited here and written back whole.

Like StrReplace it reads the `.ipynb` through `read_args`, changes it on the server and writes
the whole file with `write_args`; the IDE gets the before/after diff of the notebook's JSON.
An edit replaces `old_string` (exactly once) in the source of cell `cell_idx`; a new cell is
inserted at `cell_idx` with `new_string` as its source, and a notebook that does not exist yet
is created by inserting its first cell. Everything else in the file (outputs, metadata, key
order, indentation) is kept as it was.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from ....llm.types import ToolCall
from ..proto import agent_pb2
from .args import get_bool, get_int, str_or_empty
from .files import EditMachine, read_failure, read_text
from .machine import Finished, Handlers, Phase, Step, ToolSettings

__all__ = ["EditNotebookMachine", "NotebookEdit", "edit_notebook"]

_INDENT = re.compile(r"\{\n( +)\"")


@dataclass(frozen=True, slots=True)
class NotebookEdit:
    """An edit made: the new file text, what to tell the model, and the cell's line counts."""

    text: str
    summary: str
    lines_removed: int
    lines_added: int


def _lines(source: str) -> int:
    return len(source.splitlines()) if source else 0


def _source_text(source: Any) -> str | None:
    """A cell's source, which nbformat stores as one string or a list of lines."""
    if isinstance(source, str):
        return source
    if isinstance(source, list) and all(isinstance(s, str) for s in source):
        return "".join(source)
    return None


def _new_cell(language: str, source: str, cell_id: str | None) -> dict[str, Any]:
    kind = {"markdown": "markdown", "raw": "raw"}.get(language, "code")
    cell: dict[str, Any] = {"cell_type": kind}
    if kind == "code":
        cell["execution_count"] = None
    if cell_id is not None:
        cell["id"] = cell_id
    cell["metadata"] = {}
    if kind == "code":
        cell["outputs"] = []
    cell["source"] = source.splitlines(keepends=True)
    return cell


def _wants_ids(nb: dict[str, Any]) -> bool:
    """nbformat 4.5 and later give every cell an id."""
    major, minor = nb.get("nbformat"), nb.get("nbformat_minor")
    return isinstance(major, int) and isinstance(minor, int) and (major, minor) >= (4, 5)


def edit_notebook(
    original: str | None,
    *,
    path: str,
    cell_idx: int,
    is_new_cell: bool,
    language: str,
    old: str,
    new: str,
    cell_id: str,
) -> NotebookEdit | str:
    """The notebook `original` (None: the file does not exist) with the edit made, or the
    error text saying why it cannot be. `cell_id` names an inserted cell when the notebook's
    format has cell ids."""
    unchanged = "The notebook was not changed."
    if original is None:
        if not (is_new_cell and cell_idx == 0):
            return (
                f"Error: notebook not found: {path}. To create it, insert its first cell "
                "(is_new_cell true, cell_idx 0)."
            )
        nb: dict[str, Any] = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
        indent, newline = 1, True
    else:
        try:
            parsed = json.loads(original)
        except json.JSONDecodeError as exc:
            return f"Error: {path} is not valid notebook JSON ({exc.msg}). {unchanged}"
        if not isinstance(parsed, dict) or not isinstance(parsed.get("cells"), list):
            return f"Error: {path} is not a Jupyter notebook (no cells list). {unchanged}"
        nb = parsed
        match = _INDENT.match(original)
        indent = len(match.group(1)) if match else 1
        newline = original.endswith("\n")
    cells: list[Any] = nb["cells"]
    if is_new_cell:
        if not 0 <= cell_idx <= len(cells):
            return (
                f"Error: cell_idx {cell_idx} is out of range: a new cell goes at 0 to "
                f"{len(cells)} in {path}. {unchanged}"
            )
        cell = _new_cell(language, new, cell_id if _wants_ids(nb) else None)
        cells.insert(cell_idx, cell)
        summary = (
            f"Inserted a new {cell['cell_type']} cell at index {cell_idx} of {path} "
            f"({len(cells)} cells now)."
        )
        removed, added = 0, _lines(new)
    else:
        if not 0 <= cell_idx < len(cells):
            return (
                f"Error: cell_idx {cell_idx} is out of range: {path} has {len(cells)} cells "
                f"(0 to {len(cells) - 1}). {unchanged}"
            )
        cell = cells[cell_idx]
        source = _source_text(cell.get("source")) if isinstance(cell, dict) else None
        if source is None:
            return f"Error: cell {cell_idx} of {path} has no readable source. {unchanged}"
        if old == "":
            if source.strip():
                return (
                    f"Error: old_string is empty but cell {cell_idx} of {path} is not. Quote "
                    f"the text to replace. {unchanged}"
                )
            edited = new
        else:
            count = source.count(old)
            if count == 0:
                return (
                    f"Error: old_string was not found in cell {cell_idx} of {path}. Read the "
                    f"notebook again and quote the cell's text exactly. {unchanged}"
                )
            if count > 1:
                return (
                    f"Error: old_string occurs {count} times in cell {cell_idx} of {path}. "
                    f"Include more surrounding text to make it unique. {unchanged}"
                )
            edited = source.replace(old, new, 1)
        cell["source"] = edited.splitlines(keepends=True)
        summary = f"Edited cell {cell_idx} of {path}."
        removed, added = _lines(old), _lines(new)
    text = json.dumps(nb, indent=indent, ensure_ascii=False) + ("\n" if newline else "")
    return NotebookEdit(text=text, summary=summary, lines_removed=removed, lines_added=added)


def _missing(result: agent_pb2.ReadResult) -> bool:
    """Whether the read says the file does not exist. oh-my-pi answers a missing file with an
    `error` saying "not found" rather than `file_not_found`; both count."""
    if result.HasField("file_not_found"):
        return True
    return result.HasField("error") and "not found" in result.error.error.lower()


class EditNotebookMachine(EditMachine):
    REQUIRED = ("target_notebook", "new_string")
    FAILED_NOTE = " The notebook was not changed."

    def __init__(
        self, tool_call: ToolCall, *, call_id: str, model_call_id: str, settings: ToolSettings
    ) -> None:
        super().__init__(tool_call, call_id=call_id, model_call_id=model_call_id, settings=settings)
        self._before = ""
        self._edit: NotebookEdit | None = None

    @property
    def path(self) -> str:
        return str_or_empty(self.args, "target_notebook")

    @property
    def cell_idx(self) -> int | None:
        value = get_int(self.args, "cell_idx")
        return value if value is not None and value >= 0 else None

    def _argument_problem(self) -> str | None:
        problem = super()._argument_problem()
        if problem is not None:
            return problem
        if self.cell_idx is None:
            return "Error: cell_idx must be a cell number, 0 or more."
        if get_bool(self.args, "is_new_cell") is not True and not isinstance(
            self.args.get("old_string"), str
        ):
            return "Error: editing a cell needs old_string, the text in it to replace."
        return None

    def _first_exec(self) -> bytes:
        whole = agent_pb2.ReadArgs(path=self.path, tool_call_id=self.tool_call_id)
        return self._exec("read_args", whole)

    def _on_read(self, result: agent_pb2.ReadResult, now_ms: int) -> Step:
        path = self.path
        original: str | None = None
        if not _missing(result):
            failure = read_failure(result, path)
            if failure is not None:
                return self._refuse(failure, now_ms)
            original = read_text(result.success)
            if original is None:
                return self._refuse(f"Error: {path} is not a text file; it is no notebook.", now_ms)
            if result.success.truncated:
                return self._refuse(
                    f"Error: the client returned only part of {path}; it was not edited.", now_ms
                )
        language = str_or_empty(self.args, "cell_language").lower()
        edit = edit_notebook(
            original,
            path=path,
            cell_idx=self.cell_idx or 0,
            is_new_cell=get_bool(self.args, "is_new_cell") is True,
            language=language,
            old=str_or_empty(self.args, "old_string"),
            new=str_or_empty(self.args, "new_string"),
            cell_id=hashlib.sha256(self.tool_call_id.encode()).hexdigest()[:8],
        )
        if isinstance(edit, str):
            return self._refuse(edit, now_ms)
        self._before = original or ""
        self._edit = edit
        return self._next_exec(Phase.WRITING, *self._write(edit.text))

    def _refuse(self, text: str, now_ms: int) -> Finished:
        tc = self._card()
        self._set_error(tc, text)
        return self._finish(text, tc, now_ms, is_error=True)

    def _written(self, ok: agent_pb2.EditSuccess) -> str:
        assert self._edit is not None  # the write goes out only after the edit was made
        ok.before_full_file_content = self._before
        ok.after_full_file_content = self._edit.text
        ok.lines_removed = self._edit.lines_removed
        ok.lines_added = self._edit.lines_added
        return self._edit.summary

    HANDLERS: ClassVar[Handlers] = {
        Phase.RUNNING: {"read_result": _on_read},
        Phase.WRITING: {"write_result": EditMachine._on_write},
    }
