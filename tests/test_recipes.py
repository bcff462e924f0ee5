"""docs/ARCHITECTURE.md's recipe for adding an optimizer works as written.

The test copies the package, inserts each of the recipe's code blocks where its first line
says, and asks the copy's command line for an estimate with the new optimizer.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPE = re.compile(r"```python\n# file: (?P<path>\S+), at the end of `(?P<anchor>[^`]+)`\n(?P<body>.*?)```", re.S)


def recipe_blocks(section: str) -> list[tuple[str, str, str]]:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    start = text.index(f"### {section}")
    end = text.find("\n### ", start + 1)
    return [(m["path"], m["anchor"], m["body"]) for m in RECIPE.finditer(text[start:end if end > 0 else None])]


def insert_at_end_of(source: str, anchor: str, body: str) -> str:
    """``body`` before the line that ends the block opened by the line starting with ``anchor``
    (a closing brace, or the blank line after a class's members)."""
    lines = source.split("\n")
    first = next(i for i, line in enumerate(lines) if line.startswith(anchor))
    end = next(i for i in range(first + 1, len(lines)) if lines[i] in ("}", ""))
    return "\n".join(lines[:end] + body.rstrip("\n").split("\n") + lines[end:])


def test_the_optimizer_recipe_adds_one_that_the_cli_estimates(tmp_path):
    blocks = recipe_blocks("Add an optimizer")
    assert [path for path, _, _ in blocks] == ["calc/types.py", "calc/facts/optimizers.py", "calc/keras/step.py"]
    shutil.copytree(ROOT / "calc", tmp_path / "calc", ignore=shutil.ignore_patterns("__pycache__", "models"))
    for path, anchor, body in blocks:
        target = tmp_path / path
        target.write_text(insert_at_end_of(target.read_text(), anchor, body))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "CALC_CACHE_DIR": str(tmp_path / "cache")}

    def cli(*args):
        out = subprocess.run([sys.executable, "-m", "calc", *args], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    where = subprocess.run([sys.executable, "-c", "import calc; print(calc.__file__)"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60).stdout.strip()
    assert where == str(tmp_path / "calc" / "__init__.py")
    new = json.loads(cli("estimate", "--model", "MobileNetV2", "--batch-size", "8", "--optimizer",
                         "schedule_free_adamw", "--step", "graph", "--json"))
    adamw = json.loads(cli("estimate", "--model", "MobileNetV2", "--batch-size", "8", "--optimizer", "adamw",
                           "--step", "graph", "--json"))
    sgd = json.loads(cli("estimate", "--model", "MobileNetV2", "--batch-size", "8", "--optimizer", "sgd",
                         "--step", "graph", "--json"))
    # Two slots per trainable variable, as the recipe's entry says (AdamW's two); SGD has none.
    assert new["optimizer"] == "schedule_free_adamw" and sgd["components"]["optimizer_state"] == 0
    assert new["components"]["optimizer_state"] == adamw["components"]["optimizer_state"] > 0
    assert "schedule_free_adamw" in cli("estimate", "--help")
