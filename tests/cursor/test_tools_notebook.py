"""EditNotebook: the notebook is read, one cell edited (or a cell inserted) here, and the whole
JSON written back; the rest of the file stays as it was."""

from __future__ import annotations

import json
from typing import Any

from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.tools import Phase
from cursor_byok.transport.cursor.tools.notebook import NotebookEdit, edit_notebook
from tests.cursor.tool_support import (
    T0,
    begin,
    completed,
    esm,
    finished,
    reply,
    sent,
    start,
    started_card,
)

NB: dict[str, Any] = {
    "cells": [
        {"cell_type": "markdown", "id": "m1", "metadata": {}, "source": ["# Title\n", "intro"]},
        {
            "cell_type": "code",
            "execution_count": 3,
            "id": "c1",
            "metadata": {"tags": ["keep"]},
            "outputs": [{"output_type": "stream", "name": "stdout", "text": ["2\n"]}],
            "source": "x = 1\nprint(x + 1)",
        },
    ],
    "metadata": {"kernelspec": {"name": "python3"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}
TEXT = json.dumps(NB, indent=1) + "\n"


def edit(original: str | None = TEXT, **kw: Any) -> NotebookEdit | str:
    args: dict[str, Any] = {
        "path": "/w/n.ipynb", "cell_idx": 1, "is_new_cell": False, "language": "python",
        "old": "", "new": "", "cell_id": "abc12345",
    }  # fmt: skip
    args.update(kw)
    return edit_notebook(original, **args)


def test_edit_replaces_text_in_one_cell_and_keeps_the_rest() -> None:
    done = edit(old="x + 1", new="x + 2")
    assert isinstance(done, NotebookEdit)
    nb = json.loads(done.text)
    assert nb["cells"][1]["source"] == ["x = 1\n", "print(x + 2)"]
    expect = json.loads(TEXT)
    expect["cells"][1]["source"] = ["x = 1\n", "print(x + 2)"]
    assert nb == expect  # outputs, metadata, ids untouched
    assert done.text.endswith("}\n") and done.text.startswith('{\n "cells"')
    assert done.summary == "Edited cell 1 of /w/n.ipynb."
    # The file's own indentation is kept.
    two = edit(json.dumps(NB, indent=2), old="x = 1", new="y = 1")
    assert isinstance(two, NotebookEdit) and two.text.startswith('{\n  "cells"')
    assert not two.text.endswith("\n")


def test_insert_cells() -> None:
    done = edit(cell_idx=2, is_new_cell=True, language="python", new="import os\nos.getcwd()")
    assert isinstance(done, NotebookEdit)
    cell = json.loads(done.text)["cells"][2]
    assert cell == {
        "cell_type": "code", "execution_count": None, "id": "abc12345", "metadata": {},
        "outputs": [], "source": ["import os\n", "os.getcwd()"],
    }  # fmt: skip
    assert done.summary == "Inserted a new code cell at index 2 of /w/n.ipynb (3 cells now)."
    assert (done.lines_removed, done.lines_added) == (0, 2)
    done = edit(cell_idx=0, is_new_cell=True, language="markdown", new="## Notes")
    assert isinstance(done, NotebookEdit)
    assert json.loads(done.text)["cells"][0] == {
        "cell_type": "markdown", "id": "abc12345", "metadata": {}, "source": ["## Notes"],
    }  # fmt: skip
    # Before nbformat 4.5 cells have no id.
    old = json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 2})
    done = edit(old, cell_idx=0, is_new_cell=True, language="raw", new="raw text")
    assert isinstance(done, NotebookEdit)
    assert json.loads(done.text)["cells"] == [
        {"cell_type": "raw", "metadata": {}, "source": ["raw text"]}
    ]


def test_a_missing_notebook_is_created_by_its_first_cell() -> None:
    done = edit(None, cell_idx=0, is_new_cell=True, new="print('hi')")
    assert isinstance(done, NotebookEdit)
    nb = json.loads(done.text)
    assert (nb["nbformat"], nb["nbformat_minor"], nb["metadata"]) == (4, 5, {})
    assert nb["cells"][0]["source"] == ["print('hi')"]
    assert edit(None, old="x", new="y") == (
        "Error: notebook not found: /w/n.ipynb. To create it, insert its first cell "
        "(is_new_cell true, cell_idx 0)."
    )


def test_edit_errors() -> None:
    unchanged = "The notebook was not changed."
    assert edit(old="nope", new="y") == (
        "Error: old_string was not found in cell 1 of /w/n.ipynb. Read the notebook again and "
        f"quote the cell's text exactly. {unchanged}"
    )
    assert edit(old="x", new="y") == (
        "Error: old_string occurs 2 times in cell 1 of /w/n.ipynb. Include more surrounding "
        f"text to make it unique. {unchanged}"
    )
    assert edit(cell_idx=2, old="x", new="y") == (
        f"Error: cell_idx 2 is out of range: /w/n.ipynb has 2 cells (0 to 1). {unchanged}"
    )
    assert edit(cell_idx=3, is_new_cell=True, new="y") == (
        f"Error: cell_idx 3 is out of range: a new cell goes at 0 to 2 in /w/n.ipynb. {unchanged}"
    )
    assert str(edit(old="", new="y")).startswith("Error: old_string is empty but cell 1")
    assert str(edit("{not json", old="a", new="b")).startswith(
        "Error: /w/n.ipynb is not valid notebook JSON ("
    )
    assert edit("[1, 2]", old="a", new="b") == (
        f"Error: /w/n.ipynb is not a Jupyter notebook (no cells list). {unchanged}"
    )


def test_machine_reads_edits_and_writes_the_notebook() -> None:
    args = {
        "target_notebook": "/w/n.ipynb", "cell_idx": 1, "is_new_cell": False,
        "cell_language": "python", "old_string": "print(x + 1)", "new_string": "print(x * 3)",
    }  # fmt: skip
    tool, out, _ = start("EditNotebook", args)
    assert started_card(out).edit_tool_call.args.path == "/w/n.ipynb"
    read = esm(out)
    assert read.read_args == a.ReadArgs(path="/w/n.ipynb", tool_call_id="toolu_1")
    result = a.ReadResult(success=a.ReadSuccess(path="/w/n.ipynb", content=TEXT))
    (write,) = sent(tool.feed(reply(read.id, read_result=result), T0))
    assert tool.phase is Phase.WRITING
    wa = write.exec_server_message.write_args
    assert wa.path == "/w/n.ipynb" and wa.tool_call_id == "toolu_1"
    assert json.loads(wa.file_text)["cells"][1]["source"] == ["x = 1\n", "print(x * 3)"]
    ok = a.WriteResult(success=a.WriteSuccess(path="/w/n.ipynb"))
    done = finished(tool.feed(reply(write.exec_server_message.id, write_result=ok), T0))
    assert done.result.text == "Edited cell 1 of /w/n.ipynb." and not done.result.is_error
    success = completed(done).edit_tool_call.result.success
    assert success.before_full_file_content == TEXT
    assert success.after_full_file_content == wa.file_text
    assert (success.lines_removed, success.lines_added) == (1, 1)


def test_machine_refusals_send_no_write() -> None:
    args = {"target_notebook": "/w/n.ipynb", "cell_idx": 0, "is_new_cell": False,
            "old_string": "absent", "new_string": "y"}  # fmt: skip
    tool, _out, ids = start("EditNotebook", args)
    result = a.ReadResult(success=a.ReadSuccess(content=TEXT))
    done = finished(tool.feed(reply(1, read_result=result), T0))
    assert done.result.is_error and "old_string was not found in cell 0" in done.result.text
    assert completed(done).edit_tool_call.result.error.error == done.result.text
    assert ids.next == 2
    # A missing notebook with an insert at 0 is created.
    args = {"target_notebook": "/w/new.ipynb", "cell_idx": 0, "is_new_cell": True,
            "cell_language": "markdown", "old_string": "", "new_string": "# New"}  # fmt: skip
    tool, _out, ids = start("EditNotebook", args)
    missing = a.ReadResult(file_not_found=a.ReadFileNotFound(path="/w/new.ipynb"))
    (write,) = sent(tool.feed(reply(1, read_result=missing), T0))
    cells = json.loads(write.exec_server_message.write_args.file_text)["cells"]
    assert cells[0]["cell_type"] == "markdown" and cells[0]["source"] == ["# New"]
    # A rejected write is the model's error.
    rejected = a.WriteResult(rejected=a.WriteRejected(reason="no"))
    done = finished(tool.feed(reply(2, write_result=rejected), T0))
    assert done.result.is_error
    assert done.result.text == (
        "The user rejected writing /w/new.ipynb: no The notebook was not changed."
    )
    # Bad arguments: nothing is sent.
    for bad, why in (
        ({"target_notebook": "/w/n.ipynb", "new_string": "y", "cell_idx": -1}, "cell_idx"),
        ({"target_notebook": "/w/n.ipynb", "new_string": "y", "cell_idx": 0}, "old_string"),
        ({"cell_idx": 0, "new_string": "y", "is_new_cell": True}, "target_notebook"),
    ):
        _tool, started, ids = begin("EditNotebook", bad)
        assert started.early is not None and why in started.early.result.text
        assert ids.next == 1


def test_a_not_found_error_counts_as_a_missing_notebook() -> None:
    """oh-my-pi answers a read of a missing file with an error saying "not found"."""
    args = {"target_notebook": "/w/new.ipynb", "cell_idx": 0, "is_new_cell": True,
            "cell_language": "python", "old_string": "", "new_string": "1"}  # fmt: skip
    tool, _out, _ = start("EditNotebook", args)
    error = a.ReadResult(error=a.ReadError(error="Path '/w/new.ipynb' not found"))
    (write,) = sent(tool.feed(reply(1, read_result=error), T0))
    assert json.loads(write.exec_server_message.write_args.file_text)["cells"][0]["source"] == ["1"]
    # Any other read error is the model's error, and nothing is written.
    tool, _out, ids = start("EditNotebook", args)
    error = a.ReadResult(error=a.ReadError(error="EIO"))
    done = finished(tool.feed(reply(1, read_result=error), T0))
    assert done.result.text == "Error reading /w/new.ipynb: EIO" and ids.next == 2
