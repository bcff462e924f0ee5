"""The shape the engine keeps: no file in ``calc/`` over 500 lines, no function over 80
lines of code, no import cycle between its modules (imports inside functions count).

    python tools/code_shape.py        # prints every breach, exits 1 if there is one
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "calc"
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def code_lines(node: ast.AST, source_lines: list[str]) -> int:
    """Lines of a function that hold code: not blank, not comments, not its docstring."""
    body = getattr(node, "body", [])
    skip: set[int] = set()
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        skip = set(range(body[0].lineno, body[0].end_lineno + 1))
    count = 0
    for n in range(node.lineno, node.end_lineno + 1):
        text = source_lines[n - 1].strip()
        if n not in skip and text and not text.startswith("#"):
            count += 1
    return count


def imports_of(tree: ast.AST, name: str, is_package: bool) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return {m for m in out if m == "calc" or m.startswith("calc.")}


def breaches() -> list[str]:
    found: list[str] = []
    graph: dict[str, set[str]] = {}
    files = sorted(ROOT.rglob("*.py"))
    names = {module_name(p) for p in files}
    for path in files:
        text = path.read_text()
        lines = text.splitlines()
        rel = path.relative_to(ROOT.parent)
        if len(lines) > MAX_FILE_LINES:
            found.append(f"{rel}: {len(lines)} lines (at most {MAX_FILE_LINES})")
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = code_lines(node, lines)
                if n > MAX_FUNCTION_LINES:
                    found.append(f"{rel}:{node.lineno} {node.name}: {n} lines of code (at most {MAX_FUNCTION_LINES})")
        name = module_name(path)
        graph[name] = {m for m in imports_of(tree, name, path.name == "__init__.py") if m in names and m != name}
    found.extend(f"import cycle: {' -> '.join(c)}" for c in cycles(graph))
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    found = breaches()
    for line in found:
        print(line)
    print(f"{len(found)} breaches of the engine's shape")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
