"""Every text the interface shows has its Japanese and Korean, with the same values in it."""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest

from dashboard import i18n

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py")), *sorted((ROOT / "dashboard").glob("*.py")),
           ROOT / "calc" / "caveats.py"]
TRANSLATED = ("ja", "ko")
JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")
KOREAN = re.compile(r"[\uac00-\ud7af]")


def texts_in_code() -> dict[str, str]:
    """Every literal given to ``tr`` or ``mark``: text -> where it is."""
    found: dict[str, str] = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("tr", "mark"):
                first = node.args[0] if node.args else None
                assert not isinstance(first, ast.JoinedStr), f"{path.name}:{node.lineno}: an f-string given to {node.func.id}"
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    found.setdefault(first.value, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}


def test_the_code_shows_texts_through_tr():
    found = texts_in_code()
    assert len(found) > 200
    assert any(where.startswith("pages/formula.py") for where in found.values())


@pytest.mark.parametrize("lang", TRANSLATED)
def test_every_text_has_its_translation_with_the_same_values(lang):
    catalogue = i18n.catalogue()
    problems = []
    for text, where in texts_in_code().items():
        translated = catalogue.get(text, {}).get(lang)
        if not translated:
            problems.append(f"{where}: no {lang}: {text[:70]!r}")
        elif fields(translated) != fields(text):
            problems.append(f"{where}: {lang} has {sorted(fields(translated))}, English {sorted(fields(text))}")
    assert not problems, "\n".join(problems[:40]) + f"\n({len(problems)} in all)"


def test_every_catalogue_entry_is_used_and_written_in_its_script():
    used = texts_in_code()
    catalogue = i18n.catalogue()
    unused = sorted(set(catalogue) - set(used))
    assert not unused, f"entries no code shows: {unused[:20]}"
    for text, translations in catalogue.items():
        assert set(translations) == set(TRANSLATED), text
        words = re.sub(r"\{[^}]*\}|`[^`]*`", "", text)
        if re.search(r"[A-Za-z]{4,} [A-Za-z]{2,}", words):  # a phrase, not a unit, a symbol or a name
            assert JAPANESE.search(translations["ja"]), f"ja not Japanese: {text[:60]!r}"
            assert KOREAN.search(translations["ko"]), f"ko not Korean: {text[:60]!r}"


def test_no_text_is_in_two_catalogues():
    import json

    seen: dict[str, str] = {}
    for path in sorted(i18n.LOCALES.glob("*.json")):
        for text in json.loads(path.read_text(encoding="utf-8")):
            assert text not in seen, f"{text!r} in {seen[text]} and {path.name}: one would hide the other"
            seen[text] = path.name


def test_tr_translates_formats_and_falls_back_to_english():
    text = next(t for t in texts_in_code() if fields(t))
    values = {name: 7 for name in fields(text)}
    try:
        assert i18n.set_language("ja") == "ja"
        assert i18n.tr(text, **values) == i18n.catalogue()[text]["ja"].format(**values)
        assert i18n.tr("a text nobody wrote") == "a text nobody wrote"
        assert i18n.set_language("xx") == "en"
        assert i18n.tr(text, **values) == text.format(**values)
    finally:
        i18n.set_language("en")


PAGES = ["pages/estimator.py", "pages/layers.py", "pages/formula.py", "pages/compare.py", "pages/validation.py"]
LINK = {"model": "MobileNetV2", "image_size": "224", "batch_size": "16", "optimizer": "adam", "gpu": "t4"}


@pytest.mark.server
@pytest.mark.parametrize("lang", ["en", *TRANSLATED])
def test_every_page_renders_in_the_language_of_the_link(lang):
    from streamlit.testing.v1 import AppTest

    script = {"en": re.compile(r"[A-Za-z]"), "ja": JAPANESE, "ko": KOREAN}[lang]
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    for key, value in {**LINK, "lang": lang}.items():
        at.query_params[key] = value
    at.run()
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert script.search(at.title[0].value), (page, at.title[0].value)
        shown = [e.value for kind in ("markdown", "caption", "header", "subheader", "info", "warning")
                 for e in getattr(at, kind) if isinstance(e.value, str)]
        assert not any("seed" in text.lower() for text in shown), page
        sentences = [t for t in shown if re.search(r"[A-Za-z]{4,} [a-z]{3,} [a-z]{3,}", re.sub(r"`[^`]*`", "", t))]
        assert all(script.search(t) for t in sentences), (page, [t[:80] for t in sentences if not script.search(t)])
        assert at.selectbox(key="lang").value == lang
