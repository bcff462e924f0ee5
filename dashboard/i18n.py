"""The interface's languages: the English text is the key, catalogues translate it.

Every text a page shows goes through ``tr("English text with {named} values", named=...)``.
Texts that are chosen later (labels in a dict) are marked with ``mark("...")`` where they
are written, and translated with ``tr(label)`` where they are shown. The catalogues are
``dashboard/locales/*.json``, one per part of the interface, each mapping an English text
to its Japanese and Korean: ``{"English": {"ja": "...", "ko": "..."}}``.
``tests/test_i18n.py`` reads every ``tr``/``mark`` literal in the code and fails on a text
without both translations, on translations whose ``{values}`` differ from the English,
and on catalogue entries no code uses.

The language of a run is set once, at its start (``set_language``), from the sidebar's
``lang`` widget or the link's ``lang=`` parameter; each Streamlit session runs its script in
its own thread, so the choice is held in a context variable and pure functions (the
dashboard's views) translate without being passed it. Outside the dashboard it is English.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from functools import cache
from pathlib import Path

LANGUAGES = {"en": "English", "ja": "日本語", "ko": "한국어"}
LOCALES = Path(__file__).with_name("locales")

_language: ContextVar[str] = ContextVar("language", default="en")


def set_language(lang: str) -> str:
    """Makes ``lang`` (or English, if it is not one of ``LANGUAGES``) this run's language."""
    chosen = lang if lang in LANGUAGES else "en"
    _language.set(chosen)
    return chosen


def language() -> str:
    return _language.get()


@cache
def catalogue() -> dict[str, dict[str, str]]:
    """English text -> {language: translation}, from every file in ``dashboard/locales``."""
    merged: dict[str, dict[str, str]] = {}
    for path in sorted(LOCALES.glob("*.json")):
        merged.update(json.loads(path.read_text(encoding="utf-8")))
    return merged


def tr(text: str, /, **values: object) -> str:
    """``text`` in this run's language, with ``values`` put into its ``{named}`` fields."""
    lang = _language.get()
    if lang != "en":
        text = catalogue().get(text, {}).get(lang, text)
    return text.format(**values) if values else text


def mark(text: str) -> str:
    """Marks a text for translation where it is written; ``tr`` translates it where shown."""
    return text
