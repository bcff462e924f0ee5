"""The engine keeps its shape: small files and functions, no import cycle, lint and types clean."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools import load_tool

ROOT = Path(__file__).resolve().parent.parent
code_shape = load_tool("code_shape")


def test_no_file_over_500_lines_no_function_over_80_no_import_cycle():
    assert code_shape.breaches() == []


def test_the_checker_sees_a_long_function_and_a_cycle(tmp_path, monkeypatch):
    pkg = tmp_path / "calc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from calc import b\n" + "    x = 1\n" * 80)
    (pkg / "b.py").write_text("import calc.a\n")
    monkeypatch.setattr(code_shape, "ROOT", pkg)
    found = code_shape.breaches()
    assert any(line.endswith("a.py:1 f: 82 lines of code (at most 80)") for line in found)
    assert "import cycle: calc.a -> calc.b" in found


@pytest.mark.skipif(shutil.which("ruff") is None and not (Path(sys.executable).parent / "ruff").exists(),
                    reason="ruff is not installed (requirements.txt installs it)")
def test_ruff_finds_nothing():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    out = subprocess.run([ruff, "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout


@pytest.mark.sweep
def test_mypy_finds_nothing_in_calc():
    pytest.importorskip("mypy")
    out = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout
