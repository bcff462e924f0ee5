"""Writes calc/data/xla_plans.json.gz: the plans shipped with the project.

    python tools/ship_xla_plans.py

Every case of the XLA data files (so ``python -m calc validate --step xla`` answers in
seconds), the dashboard's first page, and the step the tests compare with a fresh
compile. Plans come from the disk cache or are compiled (minutes on two cores). The
plans are keyed to the installed jax, jaxlib, plugin and Keras versions: after a version
change, run this again.
"""

from __future__ import annotations

import gzip
import json


def shipped_requests():
    """(spec, config, gpu key) of every plan to ship."""
    from dataclasses import replace

    from calc.requests import config_from_dict, spec_from_dict
    from calc.types import Device
    from calc.validation import XLA_DATA, XLA_TARGET, load_measurements
    from dashboard.loaders import spec_for
    from dashboard.state import DEFAULTS
    from dashboard.views import config_of

    seen = set()
    for path in XLA_DATA:
        for case in load_measurements(path)["cases"]:
            if case["case"] not in seen and "peak_bytes" in case:
                seen.add(case["case"])
                yield (spec_from_dict(case["spec"]), replace(config_from_dict(case["config"]), device=Device.GPU),
                       XLA_TARGET)
    yield spec_for(DEFAULTS.model, DEFAULTS.image_size, DEFAULTS.train_mode == "frozen_backbone"), \
        config_of(DEFAULTS), DEFAULTS.gpu


def main() -> int:
    from calc import xla
    from calc.xla import cache

    versions = xla.plan_versions()
    if versions is None:
        raise SystemExit(xla.unavailable_reason())
    plans = {}
    for spec, config, gpu in shipped_requests():
        plan = xla.compute_plan(spec, config, gpu)
        key = cache.cache_key(cache.plan_request(spec, config, xla.target_for(gpu)), versions)
        raw = cache.read_cached(key)
        plans[key] = {k: v for k, v in raw.items() if k != "worker_peak_rss_bytes"}
        print(f"{spec.key} b{config.batch_size} {config.optimizer.value} on {gpu}: {plan.peak_bytes / 2**20:.1f} MiB",
              flush=True)
    text = json.dumps(dict(sorted(plans.items())), indent=0, sort_keys=True)
    with gzip.GzipFile(cache.SHIPPED_PLANS, "wb", mtime=0) as f:  # the same plans give the same bytes
        f.write(text.encode())
    print(f"{len(plans)} plans -> {cache.SHIPPED_PLANS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
