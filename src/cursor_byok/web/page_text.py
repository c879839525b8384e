"""A fetched page as the text a model reads: HTML becomes light markdown, everything is bounded.

Both WebFetch paths use it: the page the client fetched (`fetch_result.content`) and the page
the server fetched itself (web/fetch.py). HTML is parsed with selectolax's lexbor parser (a C
HTML5 parser: a 500 kB page takes tens of milliseconds where a pure-Python converter took
seconds on the same machine, and the conversion runs on the server's event loop). What a
model does not read (scripts, styles, forms' machinery, embedded media) is dropped; headings,
links, lists, code blocks and table rows keep a markdown shape. Other text (plain, markdown,
JSON) passes through unchanged.
"""

from __future__ import annotations

import re

from selectolax.lexbor import LexborHTMLParser, LexborNode

__all__ = ["DEFAULT_MAX_TEXT_CHARS", "bounded_text", "is_html", "is_text", "page_text"]

# Longest page text the model reads ([web_fetch] max_text_chars); the rest is cut, with a note.
DEFAULT_MAX_TEXT_CHARS = 100_000

_DROPPED = frozenset(
    {
        "script", "style", "noscript", "template", "svg", "canvas", "iframe", "object",
        "embed", "head", "select", "button", "input", "textarea", "form-control",
    }
)  # fmt: skip
_BLOCKS = frozenset(
    {
        "p", "div", "section", "article", "main", "header", "footer", "nav", "aside", "ul",
        "ol", "dl", "dt", "dd", "table", "thead", "tbody", "tfoot", "blockquote", "figure",
        "figcaption", "form", "fieldset", "details", "summary", "address", "body", "html",
    }
)  # fmt: skip
_SPACES = re.compile(r"[ \t\r\n\f\v]+")
_BLANKS = re.compile(r"\n{3,}")
# Deeper than this, the rest of a subtree is read as plain text (no recursion without end).
_MAX_DEPTH = 200


def is_html(content: str, content_type: str) -> bool:
    """Whether the page is HTML: by its content type, else by how it starts."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind:
        return kind in ("text/html", "application/xhtml+xml")
    head = content.lstrip()[:64].lower()
    return head.startswith(("<!doctype html", "<html"))


_TEXT_TYPES = ("json", "xml", "javascript", "ecmascript", "markdown", "yaml", "toml", "csv")


def is_text(content_type: str) -> bool:
    """Whether a body of this content type is text a model can read (unknown: assume so)."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if not kind or kind.startswith("text/"):
        return True
    return any(word in kind for word in _TEXT_TYPES)


def page_text(content: str, content_type: str = "") -> str:
    """The page as the model reads it (unbounded: see `bounded_text`)."""
    if not is_html(content, content_type):
        return content.strip()
    tree = LexborHTMLParser(content)
    title_node = tree.css_first("title")
    title = _SPACES.sub(" ", title_node.text()).strip() if title_node is not None else ""
    out: list[str] = []
    root = tree.body or tree.root
    if root is not None:
        _render(root, out, 0)
    text = _tidy("".join(out))
    if title and not text.startswith(f"# {title}"):
        text = f"# {title}\n\n{text}" if text else f"# {title}"
    return text


def bounded_text(text: str, limit: int) -> tuple[str, bool]:
    """`text` cut to `limit` characters at a line break when one is near, with a note saying
    how much was left out; and whether it was cut."""
    if len(text) <= limit:
        return text, False
    cut = text.rfind("\n", 0, limit)
    if cut < limit * 0.8:
        cut = limit
    note = (
        f"\n\n[The page was cut here: {cut} of its {len(text)} characters are shown "
        f"(the limit is {limit}).]"
    )
    return text[:cut].rstrip() + note, True


def _tidy(text: str) -> str:
    lines = [line.rstrip() for line in text.split("\n")]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


def _inline(node: LexborNode) -> str:
    return _SPACES.sub(" ", node.text(deep=True))


def _render(node: LexborNode, out: list[str], depth: int) -> None:
    for child in node.iter(include_text=True):
        tag = child.tag or ""
        if tag == "-text":
            out.append(_SPACES.sub(" ", child.text_content or ""))
        elif tag.startswith("-") or tag in _DROPPED:
            continue
        elif depth >= _MAX_DEPTH:
            out.append(_inline(child))
        else:
            _element(child, tag, out, depth + 1)


def _element(node: LexborNode, tag: str, out: list[str], depth: int) -> None:
    if len(tag) == 2 and tag[0] == "h" and tag[1] in "123456":
        text = _inline(node).strip()
        if text:
            out.append(f"\n\n{'#' * int(tag[1])} {text}\n\n")
    elif tag == "a":
        text = _inline(node).strip()
        href = (node.attributes.get("href") or "").strip()
        if href and text and not href.startswith(("javascript:", "#")):
            out.append(f"[{text}]({href})")
        else:
            out.append(text)
    elif tag == "pre":
        code = (node.text(deep=True) or "").strip("\n")
        out.append(f"\n\n```\n{code}\n```\n\n")
    elif tag == "code":
        text = _inline(node).strip()
        out.append(f"`{text}`" if text else "")
    elif tag in ("b", "strong"):
        text = _inline(node).strip()
        out.append(f"**{text}**" if text else "")
    elif tag == "li":
        out.append("\n- ")
        _render(node, out, depth)
    elif tag == "tr":
        cells = [_inline(c).strip() for c in node.iter() if c.tag in ("td", "th")]
        out.append("\n| " + " | ".join(cells) + " |")
    elif tag == "br":
        out.append("\n")
    elif tag == "hr":
        out.append("\n\n---\n\n")
    elif tag == "img":
        alt = (node.attributes.get("alt") or "").strip()
        out.append(f"[image: {alt}]" if alt else "")
    elif tag in _BLOCKS:
        out.append("\n\n")
        _render(node, out, depth)
        out.append("\n\n")
    else:
        _render(node, out, depth)
