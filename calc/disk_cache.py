"""A folder of JSON entries, bounded: written atomically, the least recently used dropped.

The profiles' cache (``calc.profiles``) and the XLA plans' (``calc.xla.cache``) each keep
one such folder under ``$CALC_CACHE_DIR``. A read marks an entry used (its modification
time); a write drops the oldest entries past the folder's bound. A read-only or full disk
only costs the work again next time.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


def cache_root() -> Path:
    """The folder of every disk cache: ``$CALC_CACHE_DIR``, else ``~/.cache/keras-memory-calc``."""
    return Path(os.environ.get("CALC_CACHE_DIR", Path.home() / ".cache" / "keras-memory-calc"))


def read_entry(path: Path) -> str | None:
    """The entry's text, marked as used; None when absent or unreadable."""
    try:
        text = path.read_text()
        os.utime(path)
        return text
    except OSError:
        return None


def write_entry(path: Path, text: str, keep: int) -> None:
    """Writes ``path`` atomically, then keeps only the ``keep`` most recently used entries of its folder."""
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(text)
        os.replace(tmp, path)
        entries = sorted(folder.glob("*.json"), key=_mtime)
        for old in entries[: max(0, len(entries) - keep)]:
            old.unlink(missing_ok=True)
    except OSError:
        pass


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # removed meanwhile by another process
        return 0.0
