"""The load test script drives the real server over the websocket protocol (short run)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.server
def test_load_test_short_run_has_no_errors():
    """The load, then the load again alone and beside a hostile visitor
    who uploads as st.file_uploader does (a 4 MiB file, a 1 KiB file of a 6.4 GB model), pastes,
    builds and compiles, for 4 s and the step under way. The reader's budget is 1 GiB here."""
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "load_test.py"), "--users", "2", "--duration", "4",
         "--no-tour", "--same-model", "0", "--hostile", "--hostile-rounds", "0", "--upload-mib", "4"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, stdin=subprocess.DEVNULL,
        env=dict(os.environ, CALC_READER_GIB="1"),
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
    hostile = result["hostile"]
    assert hostile["visitor"]["uploads"] > 0, hostile["visitor_message_samples"]
    assert hostile["uploads"] and all("\n" not in u["reply"] for u in hostile["uploads"].values())
    assert hostile["changes"] >= 2 and hostile["baseline"]["changes"] >= 2
    assert hostile["peak_rss_mib_with_children"] > 0
