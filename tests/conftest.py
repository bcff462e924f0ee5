"""Test groups, by what a test needs (``pyproject.toml`` registers the markers):

- unmarked: pure tests (the engine on committed ledgers, JSON, text); they may not import
  TensorFlow, Keras or JAX, and a guard here fails one that does;
- ``keras``: builds, loads or compiles real Keras models (in-process or in a child);
- ``measure``: runs real training steps and reads TensorFlow's allocator;
- ``server``: runs the dashboard (Streamlit's AppTest, a server or the build worker);
- ``browser``: drives the dashboard in a real Chromium;
- ``sweep``: pure too, but sweeps the whole package: re-estimates every validation case or every shipped model
  (the committed reports, the golden table) or type-checks calc/ (mypy): minutes of CPU.

``python -m pytest -m "not keras and not measure and not server and not browser and not sweep"``
runs the quick pure ones alone (under a minute).
"""

import functools
import gc
import importlib.abc
import os
import subprocess
import sys

import pytest

NEEDS = ("keras", "measure", "server", "browser")
HEAVY_MODULES = ("tensorflow", "keras", "jax", "jaxlib", "tf_keras")


def pytest_collection_modifyitems(config, items):
    """Pure tests first: each worker then runs them before anything has imported TensorFlow,
    so that the guard sees every import they make."""
    items.sort(key=lambda item: any(item.get_closest_marker(m) for m in NEEDS))


class _HeavyImportGuard(importlib.abc.MetaPathFinder):
    """Refuses TensorFlow, Keras and JAX to a pure test."""

    def __init__(self, test: str):
        self.test = test

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY_MODULES:
            raise ImportError(f"{self.test} imports {name} but is not marked: mark it with one of "
                              f"{', '.join('pytest.mark.' + m for m in NEEDS)} (tests/conftest.py)")
        return None


@pytest.fixture(autouse=True)
def _pure_tests_import_no_tensorflow(request, monkeypatch):
    """An unmarked test may neither import TensorFlow, Keras or JAX nor start one of the
    package's Keras children (``python -m calc.workers...``)."""
    if any(request.node.get_closest_marker(m) for m in NEEDS):
        yield
        return
    guard = _HeavyImportGuard(request.node.nodeid)
    popen = subprocess.Popen.__init__

    def no_keras_child(self, args, *rest, **kwargs):
        argv = [str(a) for a in ([args] if isinstance(args, str) else args)]
        if "python" in os.path.basename(argv[0]) and any(a.startswith(("calc.workers", "calc.keras")) for a in argv):
            raise RuntimeError(f"{request.node.nodeid} starts a Keras child ({args}) but is not marked: mark it "
                               f"with one of {', '.join('pytest.mark.' + m for m in NEEDS)} (tests/conftest.py)")
        popen(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", no_keras_child)
    sys.meta_path.insert(0, guard)
    try:
        yield
    finally:
        sys.meta_path.remove(guard)


@pytest.fixture(autouse=True)
def _isolated_profile_cache(tmp_path_factory, monkeypatch):
    """Each test session uses its own on-disk profile cache."""
    monkeypatch.setenv("CALC_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "profile-cache"))


@pytest.fixture(scope="session", autouse=True)
def _no_dashboard_xla_compiles():
    """No test starts a real XLA compile from the dashboard (15-120 s each, dashboard/xla_jobs.py):
    pages use shipped and cached plans only. Session-wide, so servers started by module
    fixtures (tests/test_browser.py) inherit it; a test that wants compiles sets it back."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CALC_XLA_COMPILES", "off")
        yield


@pytest.fixture(scope="session", autouse=True)
def _one_scan_for_streamlit_components():
    """Streamlit's AppTest scans every installed distribution's metadata for custom components
    each time a new app first runs (``BidiComponentManager.discover_and_register_components``:
    0.8 s of CPU here, a few hundred times a run); nothing is installed during a run, so the
    scan's answer is kept from the first."""
    try:
        from streamlit.components.v2 import manifest_scanner
    except ImportError:  # a Streamlit without custom components v2 scans nothing
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(manifest_scanner, "scan_component_manifests",
                   functools.cache(manifest_scanner.scan_component_manifests))
        yield


@pytest.fixture(autouse=True)
def _long_lived_objects_leave_the_collectors_walk():
    """A worker holds TensorFlow, JAX, Keras and Streamlit (millions of objects); every full collection walks
    them all (Keras's ``clear_session`` after each in-process build asks for one: about a second each here).
    After each test what is still alive is collected once and moved out of the collector's generations
    (``gc.freeze``), so later collections walk only what later tests make; it is still freed by its counts."""
    yield
    gc.collect()
    gc.freeze()
