"""A fetched body's bytes as text, whatever charset the page claims.

Python's codec registry holds more than text encodings: `undefined` raises on every byte,
`rot13`, `hex` and `zlib` are no text encodings at all, `unicode_escape` reads backslashes,
`punycode` and `utf-7` are slow pure-Python decoders. A page names its charset, so only the
text encodings of the WHATWG Encoding Standard (what browsers decode) are taken, by any label
Python knows them under; any other label, a bogus one, or none reads as UTF-8. As browsers do,
a byte-order mark wins over the label, `iso-8859-1` and `ascii` read as windows-1252, and an
HTML page without a charset in its Content-Type is looked at for `<meta charset>` in its first
1024 bytes. Bytes a charset cannot decode (a page that mixes encodings) become U+FFFD: decoding
never raises.
"""

from __future__ import annotations

import codecs
import re

__all__ = ["decode_body", "text_codec"]

# Python's names for the WHATWG encodings (codecs.lookup(label).name), all implemented in C.
_TEXT_CODECS = frozenset(
    {
        "utf-8", "utf-16-le", "utf-16-be", "ibm866", "cp866", "iso8859-2", "iso8859-3",
        "iso8859-4", "iso8859-5", "iso8859-6", "iso8859-7", "iso8859-8", "iso8859-10",
        "iso8859-13", "iso8859-14", "iso8859-15", "iso8859-16", "koi8-r", "koi8-u",
        "mac-roman", "mac-cyrillic", "cp874", "cp1250", "cp1251", "cp1252", "cp1253", "cp1254",
        "cp1255", "cp1256", "cp1257", "cp1258", "gbk", "gb18030", "big5", "big5hkscs",
        "euc_jp", "iso2022_jp", "shift_jis", "cp932", "euc_kr", "cp949",
    }
)  # fmt: skip
# Labels browsers read as another encoding than Python's codec of the same name.
_AS_BROWSERS = {
    "iso8859-1": "cp1252",
    "ascii": "cp1252",
    "latin-1": "cp1252",
    "utf-16": "utf-16-le",
    "gb2312": "gbk",
    "euc_kr": "cp949",
    "shift_jis": "cp932",
    "big5": "big5hkscs",
}
_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_CHARSET_PARAM = re.compile(r"""charset\s*=\s*["']?([^"';\s]+)""", re.IGNORECASE)
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([a-zA-Z0-9_.:-]+)""", re.I)


def text_codec(label: str | None) -> str | None:
    """The codec a charset label names, if it is a text encoding browsers decode; else None."""
    if not label:
        return None
    try:
        name = codecs.lookup(label.strip().strip("\"'")).name
    except (LookupError, ValueError, TypeError):
        return None
    name = _AS_BROWSERS.get(name, name)
    return name if name in _TEXT_CODECS else None


def decode_body(body: bytes, content_type: str, *, html: bool = False) -> tuple[str, str]:
    """The body as text, and the codec it was read with."""
    codec = next((c for bom, c in _BOMS if body.startswith(bom)), None)
    if codec is not None:
        return _decode(body[len(codecs.BOM_UTF8) if codec == "utf-8" else 2 :], codec), codec
    declared = _CHARSET_PARAM.search(content_type)
    codec = text_codec(declared.group(1)) if declared else None
    if codec is None and declared is None and html:
        meta = _META_CHARSET.search(body[:1024])
        codec = text_codec(meta.group(1).decode("ascii", "replace")) if meta else None
    codec = codec or "utf-8"
    return _decode(body, codec), codec


def _decode(body: bytes, codec: str) -> str:
    try:
        return body.decode(codec, errors="replace")
    except (LookupError, UnicodeError, ValueError):  # a codec that raises despite "replace"
        return body.decode("utf-8", errors="replace")
