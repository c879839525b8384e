"""The result texts the model reads, and the limit that keeps them small.

Every text is cut to `MAX_RESULT_CHARS`: the head and the tail survive (a failing build says
why at the end), with a note saying how much was left out.
"""

from __future__ import annotations

from ..proto import agent_pb2

__all__ = [
    "MAX_RESULT_CHARS",
    "clip_middle",
    "format_grep",
    "format_ls",
    "format_read",
    "format_shell",
    "grep_files",
]

# Longest tool result text the model reads; longer output is cut with a note.
MAX_RESULT_CHARS = 30_000


def clip_middle(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    """Keep the head and the tail of a long text (errors are usually at the end)."""
    if len(text) <= limit:
        return text
    head = limit // 3
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[-tail:]}"


def format_shell(exit_code: int | None, stdout: str, stderr: str, note: str | None = None) -> str:
    """`Exit code: N`, then stdout and stderr; stderr keeps up to a third of the budget."""
    lines: list[str] = []
    if note:
        lines.append(note)
    if exit_code is not None:
        lines.append(f"Exit code: {exit_code}")
    budget = MAX_RESULT_CHARS
    if stdout and stderr:
        share = max(budget - min(len(stderr), budget // 3), budget // 2)
        out = clip_middle(stdout, share)
        err = clip_middle(stderr, budget - len(out))
        lines.append(f"stdout:\n{out}")
        lines.append(f"stderr:\n{err}")
    elif stdout:
        lines.append(f"stdout:\n{clip_middle(stdout, budget)}")
    elif stderr:
        lines.append(f"stderr:\n{clip_middle(stderr, budget)}")
    else:
        lines.append("(no output)")
    return "\n".join(lines)


def format_read(content: str, *, first_line: int = 1, total_lines: int | None = None) -> str:
    """Numbered lines (`     1\\tfirst line`), cut at a line boundary past the size limit, with
    a note saying where to read on."""
    if content == "":
        return "(the file is empty)" if first_line <= 1 else "(no lines in this range)"
    lines = content.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out: list[str] = []
    size = 0
    for i, line in enumerate(lines):
        numbered = f"{first_line + i:>6}\t{line}"
        if size + len(numbered) + 1 > MAX_RESULT_CHARS and out:
            break
        out.append(numbered)
        size += len(numbered) + 1
    shown = len(out)
    text = "\n".join(out)
    last = first_line + shown - 1
    total = total_lines if total_lines and total_lines >= last else None
    if shown < len(lines):
        of = f" of {total}" if total else ""
        text += (
            f"\n[Showing lines {first_line}-{last}{of}; the rest was cut at "
            f"{MAX_RESULT_CHARS} characters. Read on with offset={last + 1}.]"
        )
    elif total and last < total:
        text += f"\n[Showing lines {first_line}-{last} of {total}. Read on with offset={last + 1}.]"
    return text


def format_ls(root: agent_pb2.LsDirectoryTreeNode) -> str:
    """An indented tree, two spaces a level; a directory the client did not open shows its
    file count instead of its entries."""
    out: list[str] = []

    def visit(node: agent_pb2.LsDirectoryTreeNode, depth: int, name: str) -> None:
        pad = "  " * depth
        out.append(f"{pad}{name.rstrip('/')}/")
        if (
            depth > 0
            and not node.children_were_processed
            and not (node.children_dirs or node.children_files)
        ):
            if node.num_files:
                out.append(f"{pad}  [{node.num_files} files, not listed]")
            return
        for child in sorted(node.children_dirs, key=lambda n: n.abs_path):
            visit(child, depth + 1, child.abs_path.rstrip("/").rsplit("/", 1)[-1])
        for f in sorted(node.children_files, key=lambda f: f.name):
            out.append(f"{pad}  {f.name}")

    visit(root, 0, root.abs_path or ".")
    if len(out) == 1:
        out.append("  (empty directory)")
    return clip_middle("\n".join(out))


def _union_lines(union: agent_pb2.GrepUnionResult) -> tuple[list[str], bool, int | None]:
    """One workspace's grep answer as lines, whether the client cut it, and the head limit it
    says it applied (None when it says nothing)."""
    lines: list[str] = []
    match union.WhichOneof("result"):
        case "files":
            r = union.files
            lines.extend(r.files)
            limit = r.head_limit_applied if r.HasField("head_limit_applied") else None
            return lines, r.client_truncated or r.ripgrep_truncated, limit
        case "count":
            c = union.count
            lines.extend(f"{fc.file}: {fc.count}" for fc in c.counts)
            limit = c.head_limit_applied if c.HasField("head_limit_applied") else None
            return lines, c.client_truncated or c.ripgrep_truncated, limit
        case "content":
            m = union.content
            for fm in m.matches:
                lines.append(f"{fm.file}:")
                for match in fm.matches:
                    sep = "-" if match.is_context_line else ":"
                    cut = " [line truncated]" if match.content_truncated else ""
                    lines.append(f"  {match.line_number}{sep} {match.content}{cut}")
            limit = m.head_limit_applied if m.HasField("head_limit_applied") else None
            return lines, m.client_truncated or m.ripgrep_truncated, limit
        case _:
            return lines, False, None


def format_grep(
    success: agent_pb2.GrepSuccess, *, offset: int = 0, files_only_label: str = "No matches."
) -> str:
    """Workspace results in key order; the active editor's result only when there are none.
    A cut answer says so, and where to page on when the client applied a head limit."""
    lines: list[str] = []
    truncated = False
    limits: list[int] = []
    keys = sorted(success.workspace_results)
    unions = [success.workspace_results[key] for key in keys]
    if success.HasField("active_editor_result") and not keys:
        unions.append(success.active_editor_result)
    for union in unions:
        part, cut, limit = _union_lines(union)
        lines.extend(part)
        truncated = truncated or cut
        if limit:
            limits.append(limit)
    if not lines:
        return files_only_label
    text = "\n".join(lines)
    if truncated and limits:
        text += (
            f"\n[At least {offset + max(limits)} results; more exist. Page on with "
            f"offset={offset + max(limits)} and the same head_limit, or narrow the search.]"
        )
    elif truncated:
        text += "\n[Results were truncated by the client; narrow the search to see more.]"
    return clip_middle(text)


def grep_files(success: agent_pb2.GrepSuccess) -> tuple[list[str], int, bool, bool]:
    """The file names of a grep answer whatever its output mode (Glob asks files_with_matches,
    but a client may answer in another mode), the total the client counted, and whether the
    client or ripgrep cut the list."""
    files: list[str] = []
    total = 0
    client_cut = rg_cut = False
    for key in sorted(success.workspace_results):
        union = success.workspace_results[key]
        match union.WhichOneof("result"):
            case "files":
                r = union.files
                files.extend(r.files)
                total += max(r.total_files, len(r.files))
                client_cut, rg_cut = client_cut or r.client_truncated, rg_cut or r.ripgrep_truncated
            case "content":
                files.extend(m.file for m in union.content.matches)
                total += len(union.content.matches)
            case "count":
                files.extend(c.file for c in union.count.counts)
                total += max(union.count.total_files, len(union.count.counts))
    return files, total, client_cut, rg_cut
