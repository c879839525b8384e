"""The shape rules of docs/architecture.md that a reader relies on, checked on the tree: no
hand-written source file is longer than one sitting's read, and `Run` stays small."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.paths import REPO

SRC = REPO / "src"
MAX_LINES = 600  # a hand-written file under src/
MAX_RUN_LINES = 400  # class Run (transport/runtime/run.py)


def _generated(path: Path) -> bool:
    """protoc's output (`*_pb2.py`, `*_pb2.pyi`): its length is not ours to choose."""
    return path.name.endswith(("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"))


def _hand_written() -> list[Path]:
    return sorted(p for p in SRC.rglob("*") if p.suffix in (".py", ".pyi") and not _generated(p))


def _too_long(paths: list[Path], root: Path = REPO) -> dict[str, int]:
    lines = {p: len(p.read_text(encoding="utf-8").splitlines()) for p in paths}
    return {p.relative_to(root).as_posix(): n for p, n in lines.items() if n > MAX_LINES}


def _class_lines(path: Path, name: str) -> int:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    assert node.end_lineno is not None
    return node.end_lineno - node.lineno + 1


def test_no_hand_written_source_file_is_over_600_lines() -> None:
    assert len(_hand_written()) > 100  # the walk found the tree
    assert _too_long(_hand_written()) == {}


def test_the_generated_protobuf_is_the_only_exception(tmp_path: Path) -> None:
    long = "\n".join(["x = 1"] * (MAX_LINES + 1))
    (tmp_path / "big.py").write_text(long)
    (tmp_path / "agent_pb2.py").write_text(long)
    (tmp_path / "small.py").write_text("x = 1\n")
    found = [p for p in sorted(tmp_path.iterdir()) if not _generated(p)]
    assert _too_long(found, tmp_path) == {"big.py": MAX_LINES + 1}


def test_run_is_at_most_400_lines() -> None:
    run = SRC / "cursor_byok" / "transport" / "runtime" / "run.py"
    assert _class_lines(run, "Run") <= MAX_RUN_LINES


def _tool_name_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """Native tool names as string literals (a module's `__all__` names its own exports)."""
    from cursor_byok.loop import NATIVE_TOOL_NAMES

    exports = {
        id(node)
        for assign in ast.walk(tree)
        if isinstance(assign, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__all__" for t in assign.targets)
        for node in ast.walk(assign.value)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in NATIVE_TOOL_NAMES
        and id(node) not in exports
    ]


def test_the_runtime_never_names_a_native_tool() -> None:
    """The runtime executes what the loop decided; a tool's name in it is a decision made in
    the wrong place (CallClient's `spawns` / `to_parent` and catalogue.keeps_stdin say it)."""
    runtime = SRC / "cursor_byok" / "transport" / "runtime"
    found = {
        path.name: names
        for path in sorted(runtime.glob("*.py"))
        if (names := _tool_name_literals(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert found == {}


def test_a_tool_name_literal_is_found() -> None:
    tree = ast.parse('if call.name == "Task":\n    x = f"{y} Task"\n__all__ = ["Read"]\n')
    assert _tool_name_literals(tree) == [(1, "Task")]


def _sections(doc: str) -> dict[str, str]:
    """docs/architecture.md's package sections by the folder their heading names ("" for the
    composition root, which also covers observability/)."""
    sections: dict[str, str] = {}
    current: str | None = None
    for line in doc.splitlines():
        if line.startswith("#"):
            current = None
            if line.startswith("### `") and "/`" in line:
                current = line.split("`")[1]
            elif line.startswith("### The composition root"):
                current = ""
            if current is not None:
                sections.setdefault(current, "")
            continue
        if current is not None:
            sections[current] += line + "\n"
    return sections


def _unnamed(doc: str, modules: list[str]) -> list[str]:
    sections = _sections(doc)
    missing = []
    for module in modules:
        home = max((d for d in sections if d and module.startswith(d)), key=len, default="")
        text = sections[home]
        names = {module.rsplit("/", 1)[-1], module[len(home) :]}
        if not any(f"`{name}`" in text for name in names):
            missing.append(module)
    return missing


def test_the_architecture_map_names_every_module_in_its_package() -> None:
    root = SRC / "cursor_byok"
    modules = [
        p.relative_to(root).as_posix()
        for p in root.rglob("*.py")
        if p.name != "__init__.py" and not _generated(p) and "proto" not in p.parts
    ]
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert doc.count("### `web/`") == 1
    assert _unnamed(doc, sorted(modules)) == []


def test_a_module_named_only_in_another_package_is_unnamed() -> None:
    doc = (
        "### `loop/`\n`turns.py`\n### `transport/runtime/`\n`subagents.py`, `tools/x.py`\n"
        "### The composition root\n`cli.py`\n"
    )
    modules = ["loop/turns.py", "loop/subagents.py", "transport/runtime/tools/x.py", "app.py"]
    assert _unnamed(doc, modules) == ["loop/subagents.py", "app.py"]
