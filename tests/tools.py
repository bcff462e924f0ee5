"""Helpers of the tests: the repository's scripts in tools/ loaded as modules, what a
Markdown message shows, and waiting for a condition another thread or process makes true."""

import importlib.util
import re
import sys
import time
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parent.parent / "tools"


def load_tool(name: str) -> ModuleType:
    """``tools/<name>.py`` as a module (loaded once), with tools/ on the path as when it runs as a
    script (``measure_gpu_tf`` imports ``measure_gpu_jax`` beside it)."""
    if str(TOOLS) not in sys.path:
        sys.path.insert(0, str(TOOLS))
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def displayed(markdown: str) -> str:
    """What a Streamlit message shows: its backslash escapes (``dashboard.plain``) resolved."""
    return re.sub(r"\\(.)", r"\1", markdown)


def xla_margin(user: float = 0.05) -> float:
    """The share of the card an XLA verdict of a catalogue model keeps: the share under which every measured
    XLA step of the committed plan report fits once its largest convolution's workspace is kept beside its
    plan (each case: 1 - predicted / (its largest run - that workspace)), and the user's on top."""
    import json

    from calc.requests import config_from_dict, spec_from_dict

    root = Path(__file__).resolve().parent.parent / "calc" / "data"
    runs = {c["case"]: c for c in json.loads((root / "gpu_tf_h100_xla.json").read_text())["cases"]}
    worst = 0.0
    for c in json.loads((root / "gpu_tf_h100_xla_plan_report.json").read_text())["cases"]:
        run = runs[c["case"]]
        config = config_from_dict(run["config"])
        kept = xla_kept(spec_from_dict(run["spec"]), config.precision.value, config.per_replica_batch)
        worst = max(worst, 1 - c["predicted_bytes"] / (max(c.get("runs_bytes") or [c["measured_bytes"]]) - kept))
    return worst + user


def xla_kept(spec, precision: str, batch: int) -> int:
    """The bytes an XLA verdict keeps free beside the plan of ``spec`` at one device's ``batch`` (``calc.xla.kept``)."""
    from calc.xla.kept import kept_for

    return kept_for(spec, precision).at(batch)


# Python for a plan child (``calc.workers.plans.plan_env``, a plan worker's environment): the temporaries of a ``calc.keras.plan.PlanModel``'s
# step at ``batch`` on the card ``card`` (its target text) with XLA's own attention, as on a machine whose cuDNN
# is missing. Call it after the model's own ``plan``, which answered as the card.
XLA_ATTENTION_TEMP = '''
def xla_attention_temp(plan, batch, card):
    import jax
    from jax._src.cudnn import fused_attention_stablehlo as cudnn

    def missing():
        raise RuntimeError("cuDNN is not detected.")

    cudnn.check_cudnn_version = missing
    jax.clear_caches()
    sharding = plan._sharding(card)
    state = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=sharding), plan._state)
    return plan._step.lower(state, plan.batch(batch, sharding)).compile().memory_analysis().temp_size_in_bytes
'''


def wait_for(condition, timeout_s: float = 10.0) -> None:
    """Polls ``condition`` until it holds; fails the test past ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def in_a_plan_child(code: str, xla_flags: str = "") -> dict:
    """The last line ``code`` prints, as JSON, run in a child with a plan worker's environment (Keras on JAX),
    ``xla_flags`` added to its ``XLA_FLAGS``."""
    import json
    import subprocess
    import sys

    from calc.workers.plans import plan_env

    env = plan_env()
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {xla_flags}".strip()
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
