"""A chat's title from the person's own words.

A client's first user text is not always what the person typed: oh-my-pi opens it with a
`<system-reminder>` block, the IDE wraps the words in `<user_query>` after blocks such as
`<user_info>` or `<attached_files>`. The rule: the words inside `<user_query>` when there is
one; otherwise the text without its injected blocks (any `<tag>…</tag>` block whose tag is a
lowercase identifier and that starts a line, a lone opening or closing tag line); then the
first non-empty line, cut to a few words.
"""

from __future__ import annotations

import re

# A block a client injects: an opening tag at the start of a line, anything, its closing tag.
_BLOCK = re.compile(r"(?ms)^[ \t]*<([a-z][a-z0-9_:-]*)(?:\s[^>\n]*)?>.*?</\1>[ \t]*$")
# A tag alone on its line (a block cut off by the client's own limit, or an unpaired marker).
_LONE_TAG = re.compile(r"(?m)^[ \t]*</?[a-z][a-z0-9_:-]*(?:\s[^>\n]*)?/?>[ \t]*$")
_QUERY = re.compile(r"(?s)<user_query>(.*?)(?:</user_query>|\Z)")
NEW_CHAT = "New chat"


def user_words(text: str) -> str:
    """The person's own words in a client's user text: reminders and context blocks removed."""
    query = _QUERY.search(text)
    if query is not None and query.group(1).strip():
        text = query.group(1)
    previous = None
    while previous != text:  # nested blocks come off one level per pass
        previous = text
        text = _BLOCK.sub("", text)
    return _LONE_TAG.sub("", text).strip()


def agent_title(text: str, *, max_words: int = 6, max_chars: int = 40) -> str:
    """A short chat title: the first non-empty line of the person's own words, at most
    `max_words` words and `max_chars` characters (cut at a word boundary when possible)."""
    words_text = user_words(text)
    line = next((ln.strip() for ln in words_text.splitlines() if ln.strip()), "")
    return short_title(line, max_words=max_words, max_chars=max_chars)


def short_title(line: str, *, max_words: int = 6, max_chars: int = 40) -> str:
    """`line` cut to a title: quotes and trailing punctuation off, `New chat` when empty."""
    line = " ".join(line.split()).strip("\"'`")
    words = line.split()[:max_words]
    title = " ".join(words)
    if len(title) > max_chars:
        cut = title[:max_chars]
        space = cut.rfind(" ")
        title = cut[:space] if space >= max_chars // 2 else cut
    return title.rstrip(" .,:;-") or NEW_CHAT


__all__ = ["NEW_CHAT", "agent_title", "short_title", "user_words"]
