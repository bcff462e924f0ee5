import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: builds or trains real Keras models (seconds to minutes)")


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
