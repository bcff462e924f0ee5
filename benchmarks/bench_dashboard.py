"""Server-side timings of the dashboard (Streamlit AppTest runs the real scripts).

    python benchmarks/bench_dashboard.py

Prints: the first render of the Estimator in a fresh process (no profile cached but
the shipped ones), the re-render after a change of batch size / optimizer /
precision / GPU (median of 5), a switch to a cached model, a switch to a model
that must be built, and the same changes with a frozen backbone (where the curve
replays the allocator simulation at every drawn batch).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

from streamlit.testing.v1 import AppTest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["CALC_CACHE_DIR"] = tempfile.mkdtemp(prefix="calc-bench-")


def timed(action) -> float:
    t = time.perf_counter()
    at = action()
    elapsed = time.perf_counter() - t
    assert not at.exception, [e.value for e in at.exception]
    return elapsed


def main() -> None:
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    print(f"first render (ResNet50 default, fresh process): {timed(at.run) * 1e3:8.0f} ms", flush=True)
    changes = {
        "batch size": ("number_input", "batch_size", [8, 16, 64, 128, 32]),
        "optimizer": ("selectbox", "optimizer", ["sgd", "adamw", "rmsprop", "lion", "adam"]),
        "precision": ("selectbox", "precision", ["mixed_float16", "mixed_bfloat16", "float32"] * 2),
        "GPU": ("selectbox", "gpu", ["a100-40", "rtx-4090", "l4", "h100-80", "t4"]),
    }
    for label, (kind, key, values) in changes.items():
        times = [timed(lambda v=v: getattr(at, kind)(key=key).set_value(v).run()) for v in values]
        print(f"change of {label:10s}: median {statistics.median(times) * 1e3:6.0f} ms, max {max(times) * 1e3:6.0f} ms",
              flush=True)
    t_build = timed(lambda: at.number_input(key="image_size").set_value(192).run())
    print(f"switch to an uncached size (ResNet50 at 192, one Keras build): {t_build * 1e3:8.0f} ms", flush=True)
    t_cached = timed(lambda: at.number_input(key="image_size").set_value(224).run())
    print(f"switch back to the cached model: {t_cached * 1e3:8.0f} ms", flush=True)
    t_ship = timed(lambda: at.selectbox(key="model").set_value("EfficientNetB0").run())
    print(f"switch to another catalogue model (shipped profile): {t_ship * 1e3:8.0f} ms", flush=True)
    # A frozen backbone: every drawn batch replays the step through the allocator simulation.
    t_frozen = timed(lambda: at.selectbox(key="train_mode").set_value("frozen_backbone").run())
    print(f"switch to a frozen backbone (EfficientNetB0 without top: one Keras build): {t_frozen * 1e3:8.0f} ms",
          flush=True)
    for label, (kind, key, values) in list(changes.items())[:2]:
        times = [timed(lambda v=v: getattr(at, kind)(key=key).set_value(v).run()) for v in values]
        print(f"frozen, change of {label:10s}: median {statistics.median(times) * 1e3:6.0f} ms, "
              f"max {max(times) * 1e3:6.0f} ms", flush=True)


if __name__ == "__main__":
    main()
