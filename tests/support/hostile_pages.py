"""Pages shaped to make an HTML parser slow or hungry, each about `size` bytes, and a normal
page for comparison. An HTML5 tree builder checks the stack of open elements for many start
tags (a `<div>` closes an open `<p>` "in button scope", an `<li>` walks back to the previous
`<li>`), so deep nesting costs time growing faster than the page."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["SHAPES", "normal_page", "page"]


def _repeat(unit: str, size: int) -> str:
    return unit * max(1, size // len(unit))


def nested_div(size: int) -> str:
    return "<html><body>" + _repeat("<div>x", size) + "</body></html>"


def nested_list(size: int) -> str:
    return "<html><body>" + _repeat("<ul><li>x", size) + "</body></html>"


def nested_table(size: int) -> str:
    return "<html><body>" + _repeat("<table><tr><td>x", size) + "</body></html>"


def deep_inline(size: int) -> str:
    return "<html><body><p>" + _repeat("<b><i><span>x", size) + "</p></body></html>"


def huge_attributes(size: int) -> str:
    value = "a" * max(1, size // 8)  # two attributes on each of four links
    links = (f'<a href="/{i}" title="{value}" data-x="{value}">link {i}</a>' for i in range(4))
    body = "".join(links)
    return f"<html><body><p>{body}</p></body></html>"


def many_small_nodes(size: int) -> str:
    return "<html><body>" + _repeat("<p>a</p><span>b</span><br>", size) + "</body></html>"


SHAPES: dict[str, Callable[[int], str]] = {
    "nested-div": nested_div,
    "nested-ul-li": nested_list,
    "nested-table": nested_table,
    "deep-inline": deep_inline,
    "huge-attributes": huge_attributes,
    "many-small-nodes": many_small_nodes,
}


def page(shape: str, size: int) -> str:
    return SHAPES[shape](size)


def normal_page(size: int = 60_000) -> str:
    """A documentation page of about `size` bytes: headings, paragraphs, links, a list, code
    and a table, nested no deeper than real pages are."""
    section = (
        "<section><h2>Configuring the server</h2><p>The server reads <code>cursor-byok.toml</code>"
        " at start; see <a href='/docs/config'>the reference</a> for every key. A key it does "
        "not know is an error, so a typo never passes silently.</p><ul><li>host and port</li>"
        "<li>the database</li><li>providers and models</li></ul><pre>[server]\nport = 8700\n"
        "</pre><table><tr><th>key</th><th>default</th></tr><tr><td>port</td><td>8700</td></tr>"
        "</table></section>"
    )
    head = "<html><head><title>Guide</title><style>p{margin:0}</style></head><body><main>"
    return head + _repeat(section, size) + "</main></body></html>"
