"""Text that came from a visitor (a link's value, a file's name, an error quoting a file),
shown as the characters it is: never as Markdown, a link, an image or HTML.

Streamlit renders every message (``st.error``, ``st.warning``, ``st.spinner``...) as
GitHub-flavoured Markdown, where ``[text](url)`` is a link, ``![x](url)`` makes every
visitor's browser fetch a URL, and a bare ``https://...`` becomes a link by itself.
CommonMark lets any ASCII punctuation mark be escaped with a backslash, so escaping all
of them leaves nothing for Markdown, GFM's autolinks, Streamlit's ``:color[...]`` and
``:icon:`` directives or its ``$...$`` LaTeX to read. Plotly reads a few HTML tags in
labels (``<a href>``), so a chart's label is HTML-escaped instead.
"""

from __future__ import annotations

import html
import re

_PUNCTUATION = re.compile(r"""([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~])""")


def plain(text: object) -> str:
    """``text`` for a Markdown message: every ASCII punctuation mark escaped, on one line."""
    return _PUNCTUATION.sub(r"\\\1", " ".join(str(text).split()))


def plain_label(text: object) -> str:
    """``text`` for a Plotly label: HTML-escaped, so no tag (a link) is read from it."""
    return html.escape(str(text), quote=True)
