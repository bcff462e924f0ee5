"""The load test script drives the real server over the websocket protocol (short run)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.server
def test_load_test_short_run_has_no_errors():
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "load_test.py"), "--users", "2", "--duration", "8",
         "--no-tour", "--same-model", "2"],
        capture_output=True, text=True, timeout=240, cwd=ROOT, stdin=subprocess.DEVNULL,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["errors"] == 0, result["error_samples"]
    assert proc.returncode == 0
    assert result["changes"] >= 2
    assert result["latency_ms"]["finished"]["p95"] > 0
    assert result["latency_ms"]["chart"]["p95"] > 0
    assert result["rss_mib"]["after_load"]["rss"] > 0
    assert result["same_model"]["sessions"] == 2 and result["same_model"]["all_sessions_ms"] > 0
