"""oh-my-pi's agent (the real third-party client, running its own tools on this machine) against
our server: ReadLints, Glob and EditNotebook, with the notebook checked on disk."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.live import ServerProcess
from tests.support.upstream import FakeUpstream

pytestmark = pytest.mark.realclient


def omp(realclient: Path, server: ServerProcess, work: Path, prompt: str) -> str:
    proc = subprocess.run(
        [str(realclient / "omp-run.sh"), server.url, prompt],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "OMP_MODEL": "cursor/brain-1", "OMP_MODE": "text"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + server.log()[-3000:]
    return proc.stdout


def tool_result(upstream: FakeUpstream, marker: str) -> str:
    """The tool result the model read in the last upstream request of the turn `marker` names."""
    found: list[str] = []
    for r in list(upstream.requests):
        messages = json.loads(r.body)["messages"]
        users = [m for m in messages if m["role"] == "user"]
        if users and marker in json.dumps(users[-1]["content"]):
            found = [m["content"] for m in messages if m["role"] == "tool"]
    assert len(found) == 1, found
    return found[0]


def test_omp_read_lints_glob_and_edit_notebook(
    realclient: Path, server: ServerProcess, upstream: FakeUpstream, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    (work / "docs").mkdir(parents=True)
    (work / "docs" / "guide.md").write_text("# Guide\n")
    (work / "app.py").write_text("print('hi')\n")
    notebook = work / "calc.ipynb"

    # oh-my-pi answers diagnostics with an empty list: the model reads that there are none.
    out = omp(
        realclient, server, work, f'omp-lints [tool ReadLints {{"paths": ["{work}/app.py"]}}]'
    )
    assert "The tool said: No linter errors found." in out
    assert tool_result(upstream, "omp-lints") == "No linter errors found."

    # Glob's pattern gets `**/`: the Markdown file one directory down is found.
    prompt = f'omp-glob [tool Glob {{"glob_pattern": "*.md", "target_directory": "{work}"}}]'
    omp(realclient, server, work, prompt)
    assert "guide.md" in tool_result(upstream, "omp-glob")

    # A notebook that does not exist is created by inserting its first cell (oh-my-pi says
    # "not found" in an error, not file_not_found), then that cell is edited.
    new_cell = {
        "target_notebook": str(notebook), "cell_idx": 0, "is_new_cell": True,
        "cell_language": "python", "old_string": "", "new_string": "x = 41 + 1",
    }  # fmt: skip
    omp(realclient, server, work, f"omp-nb-new [tool EditNotebook {json.dumps(new_cell)}]")
    assert tool_result(upstream, "omp-nb-new") == (
        f"Inserted a new code cell at index 0 of {notebook} (1 cells now)."
    )
    nb = json.loads(notebook.read_text())
    assert (nb["nbformat"], nb["nbformat_minor"]) == (4, 5)
    assert [(c["cell_type"], c["source"]) for c in nb["cells"]] == [("code", ["x = 41 + 1"])]
    edit = {
        "target_notebook": str(notebook), "cell_idx": 0, "is_new_cell": False,
        "cell_language": "python", "old_string": "41 + 1", "new_string": "6 * 7",
    }  # fmt: skip
    omp(realclient, server, work, f"omp-nb-edit [tool EditNotebook {json.dumps(edit)}]")
    assert tool_result(upstream, "omp-nb-edit") == f"Edited cell 0 of {notebook}."
    nb = json.loads(notebook.read_text())
    assert [c["source"] for c in nb["cells"]] == [["x = 6 * 7"]]
