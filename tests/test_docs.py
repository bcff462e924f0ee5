"""The documents agree with the repository: generated tables, paths they name, length limits.

Pure: reads Markdown and JSON, imports no TensorFlow, Keras or JAX.
"""

import ast
import re
from pathlib import Path

import pytest

from tests.tools import load_tool

ROOT = Path(__file__).resolve().parent.parent

accuracy_tables = load_tool("accuracy_tables")

DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "notes").glob("*.md")])
# A path a document names: a word with a slash and a file extension, or a folder of this repository.
PATH = re.compile(r"(?<![\w./-])((?:calc|dashboard|pages|tests|tools|benchmarks|archive|docs|validation)"
                  r"/[\w./-]*[\w/])")


def test_the_accuracy_tables_are_the_committed_reports():
    document = accuracy_tables.DOC.read_text()
    expected = accuracy_tables.with_tables(document, accuracy_tables.tables())
    assert document == expected, "docs/ACCURACY.md is stale: run python tools/accuracy_tables.py --write"


def test_every_committed_report_has_a_row():
    names = {p.name for p in accuracy_tables.DATA_DIR.glob("*_report.json")}
    assert names, "no committed report found"
    generated = accuracy_tables.tables()
    for name in names:
        assert f"`{accuracy_tables.data_file(name)}`" in generated


def test_the_markers_are_required():
    with pytest.raises(ValueError, match="markers"):
        accuracy_tables.with_tables("no markers here", "table")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_document_names_exists(doc):
    missing = sorted({p for p in PATH.findall(doc.read_text()) if not (ROOT / p.rstrip("/")).exists()
                      and not any(ch in p for ch in "*{}")})
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc):
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text())
    missing = [link for link in links if "://" not in link and not (doc.parent / link).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} links to missing files: {missing}"


def _defines(module: Path, name: str) -> bool:
    """Whether ``module`` (a .py file) defines or imports ``name`` at its top level."""
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == name for a in node.names):
            return True
    return False


def resolves(dotted: str) -> bool:
    """Whether ``calc.x.y`` names a module of this repository, or a name one defines (read, not imported)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:i])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if module.is_file():
            rest = parts[i:]
            return not rest or (len(rest) == 1 and _defines(module, rest[0]))
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_and_name_a_document_names_exists(doc):
    names = set(re.findall(r"`(calc(?:\.\w+)+)", doc.read_text()))
    missing = sorted(n for n in names if not resolves(n))
    assert not missing, f"{doc.relative_to(ROOT)} names modules or names that do not exist: {missing}"


def test_the_readme_is_short_and_keeps_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    assert "pip install -r requirements.txt && streamlit run app.py" in readme
    assert "pip install -r requirements.txt && python -m pytest" in readme


def test_the_notes_stay_condensed():
    lines = sum(len(p.read_text().splitlines()) for p in (ROOT / "docs" / "notes").glob("*.md"))
    assert 0 < lines <= 800
