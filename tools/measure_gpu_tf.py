"""TensorFlow training steps on a GPU: the validation protocol, on a GPU machine.

    python tools/measure_gpu_tf.py cases                      # the GPU slice's case ids
    python tools/measure_gpu_tf.py measure OUT.json [--xla] [--jobs 8] [--limit-mib 10240]
                                   [--repeats 2] [--deadline-s 480] [--planned [--seed N] [--set S]] [SUBSTRING ...]
    python tools/measure_gpu_tf.py merge FROM.json INTO.json   # here: a machine's results into a data file
    python -m calc validate --data calc/data/gpu_tf_h100.json      # here: the engine against them

The same protocol as ``tools/measure_validation.py`` (``calc.workers.measure``: warm-up
until a step applied its update, reset, one step, the allocator's peak on ``GPU:0``; 1
inter-op and 1 intra-op thread; a fresh process per run), run on a GPU. Several runs
share the GPU: each process gets one allocator region of ``--limit-mib`` (through
``CALC_GPU_MEMORY_LIMIT_MIB``, read by ``calc.keras.step``) instead of nearly the
whole card, so every allocator starts alike. ``--xla`` compiles the step with XLA
(``jit_compile=True``), what Keras 3 does by default on a GPU.

``--planned`` measures the GPU holdout in ``validation/planned.json`` instead of the slice:
set ``gpu_xla`` with ``--xla``, ``gpu`` without (``tools/sample_holdout.py --gpu``, committed
with its predictions before it is measured); ``--seed N`` keeps only the holdout drawn with
that seed, so that holdouts measured before are not measured again; ``--set`` names another
planned set (``gpu_xla_limit``: steps at the card's limit, ``tools/near_limit.py``;
``gpu_xla_scaled``: the same at a scaled limit). ``--dump-root`` has XLA write each step's
compiled module with its buffer assignment into a folder of its own there.

Cases are taken largest-first (in set ``gpu_xla_limit``, the batches predicted to fit first)
and saved as each finishes, in the validation file format (a run that fails, out of memory
say, in ``OUT_failed.json`` with its message),
so a run stopped at its time limit keeps what it measured; ``--deadline-s`` stops
starting new cases after that many seconds. On a GPU machine, ``tools/gpu_tf/`` provides
TensorFlow and puts this checkout on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path
from threading import Lock

# The JAX/XLA slice's cases, for a three-way comparison (beside this script).
from measure_gpu_jax import GPU_CASES as JAX_SLICE

from calc.validation import CPU_DATA, case_id, cases, load_measurements, save_measurement
from calc.validation.planned import planned_cases, planned_predictions
from calc.workers.measure import MeasurementError, measure_training_step

MIB = 1 << 20
SAMPLE_SEED = 2026
SAMPLE_SIZE = 36
MAX_CPU_PEAK = 5 << 30  # keeps each run well inside its region
LIMIT_SET = "gpu_xla_limit"  # steps at the card's limit (tools/near_limit.py)
SCALED_SET = "gpu_xla_scaled"  # the same at a scaled limit (tools/near_limit.py --slop)


def gpu_cases() -> list[tuple]:
    """The JAX slice's cases plus a seeded draw of the other CPU-measured ones under 5 GiB.

    Returned largest CPU peak first (the longest runs start first).
    """
    cpu = {c["case"]: c["peak_bytes"] for c in load_measurements()["cases"]}
    by_id = {case_id(s, c): (s, c) for s, c in cases(CPU_DATA)}
    rest = sorted(cid for cid, peak in cpu.items() if cid in by_id and peak <= MAX_CPU_PEAK and cid not in JAX_SLICE)
    drawn = random.Random(SAMPLE_SEED).sample(rest, SAMPLE_SIZE)
    chosen = [cid for cid in JAX_SLICE if cid in by_id] + drawn
    return [by_id[cid] for cid in sorted(chosen, key=lambda cid: -cpu.get(cid, 0))]


def holdout_cases(xla: bool, seed: int | None = None, validation_set: str | None = None) -> list[tuple]:
    """The planned GPU holdout (set ``gpu_xla`` or ``gpu``, or ``validation_set``; with ``seed``, that draw
    only), largest prediction first."""
    validation_set = validation_set or ("gpu_xla" if xla else "gpu")
    predicted = planned_predictions(validation_set, seed=seed)
    chosen = planned_cases(validation_set, seed=seed)
    if validation_set in (LIMIT_SET, SCALED_SET):
        # Each model's largest batch predicted to fit before any batch above it: a lease that ends
        # early has measured the steps that answer "does B run?" first.
        batches: dict[str, list[int]] = {}
        for spec, config in chosen:
            batches.setdefault(spec.key, []).append(config.batch_size)
        return sorted(chosen, key=lambda sc: (sorted(batches[sc[0].key]).index(sc[1].batch_size),
                                              -predicted.get(case_id(*sc), 0)))
    return sorted(chosen, key=lambda sc: -predicted.get(case_id(*sc), 0))


def dump_folder(spec, config) -> str:
    """The name of the folder XLA dumps one step into (``dump_flags``), as ``tools/gpu_tf/xla_dumps.py`` keys it."""
    return "".join(ch if ch.isalnum() else "_" for ch in case_id(spec, config))


def dump_flags(dump_root: Path | None, spec, config) -> dict[str, str]:
    """The environment that has XLA write one step's compiled module with its buffer assignment into a
    folder of its own under ``dump_root`` (``tools/gpu_tf/xla_dumps.py`` reads them); none without one."""
    if dump_root is None:
        return {}
    folder = dump_root / dump_folder(spec, config)
    return {"XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={folder} --xla_dump_hlo_as_proto".strip()}


def measure(out: Path, *, xla: bool, jobs: int, limit_mib: int, repeats: int, deadline_s: float,
            names: list[str], planned: bool = False, seed: int | None = None, planned_set: str | None = None,
            dump_root: Path | None = None) -> None:
    os.environ["CALC_GPU_MEMORY_LIMIT_MIB"] = str(limit_mib)
    done = {c["case"] for c in load_measurements(out)["cases"]}
    todo = [(s, replace(c, device="gpu")) for s, c in (holdout_cases(xla, seed, planned_set) if planned else gpu_cases())
            if case_id(s, c) not in done and (not names or any(n in case_id(s, c) for n in names))]
    print(f"{len(todo)} cases to measure, xla={xla}, {jobs} at a time, {limit_mib} MiB each", flush=True)
    started = time.monotonic()
    lock = Lock()

    failures = out.with_name(out.stem + "_failed.json")

    def one(spec, config):
        cid = case_id(spec, config)
        if time.monotonic() - started > deadline_s:
            return cid, None
        try:
            m = measure_training_step(spec, config, repeats=repeats, xla=xla, timeout_s=max(60.0, deadline_s),
                                      env=dump_flags(dump_root, spec, config))
        except MeasurementError as exc:
            # A step above the plan's largest batch is expected to fail out of memory: kept, by case.
            with lock:
                failed = json.loads(failures.read_text()) if failures.exists() else {}
                failed[cid] = str(exc)[-2000:]
                failures.write_text(json.dumps(failed, indent=1, sort_keys=True) + "\n")
            raise MeasurementError(f"{cid}: {exc}") from exc
        with lock:
            save_measurement(out, spec, config, m)
        return cid, m

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(one, s, c) for s, c in todo]
        for f in as_completed(futures):
            try:
                cid, m = f.result()
            except MeasurementError as exc:
                print(f"FAILED {exc}", flush=True)
                continue
            if m is None:
                print(f"SKIPPED {cid} (deadline)", flush=True)
            else:
                print(f"{cid:70s} {m.peak_bytes / MIB:9.1f} MiB spread {m.spread * 100:4.1f}% {m.seconds:6.1f}s"
                      f" jit_compile={m.jit_compile}", flush=True)


def merge(source: Path, into: Path) -> None:
    """Adds the measured cases of ``source`` to ``into`` (a case measured again replaces the old one).

    The environments must agree on the device, the versions and the threads;
    ``into`` keeps its own environment text otherwise.
    """
    new, old = load_measurements(source), load_measurements(into)
    same = ("device", "tensorflow", "keras", "threads")
    if old["cases"] and any(new["environment"].get(k) != old["environment"].get(k) for k in same):
        raise SystemExit(f"{source} was measured in another environment than {into}: "
                         f"{ {k: new['environment'].get(k) for k in same} }")
    ids = {c["case"] for c in new["cases"]}
    old["cases"] = [c for c in old["cases"] if c["case"] not in ids] + new["cases"]
    old["environment"] = old["environment"] or new["environment"]
    into.write_text(json.dumps(old, indent=1) + "\n")
    print(f"{len(ids)} cases from {source} in {into} ({len(old['cases'])} in all)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("cases", "measure", "merge"))
    parser.add_argument("out", nargs="?")
    parser.add_argument("names", nargs="*")
    parser.add_argument("--xla", action="store_true")
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--limit-mib", type=int, default=10240)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--deadline-s", type=float, default=480.0)
    parser.add_argument("--planned", action="store_true", help="the GPU holdout of validation/planned.json")
    parser.add_argument("--seed", type=int, help="with --planned: only the holdout drawn with this seed")
    parser.add_argument("--set", dest="planned_set", help="with --planned: this set of validation/planned.json "
                                                          "(default gpu_xla with --xla, gpu without)")
    parser.add_argument("--dump-root", type=Path, help="XLA writes each step's compiled module under this folder")
    args = parser.parse_args()
    if args.seed is not None and not args.planned:
        parser.error("--seed picks a planned holdout: use it with --planned")
    if args.command == "cases":
        for s, c in (holdout_cases(args.xla, args.seed, args.planned_set) if args.planned else gpu_cases()):
            print(case_id(s, c))
        return
    if args.command == "merge":
        if not args.out or len(args.names) != 1:
            parser.error("merge needs FROM.json INTO.json")
        merge(Path(args.out), Path(args.names[0]))
        return
    if not args.out:
        parser.error("measure needs OUT.json")
    measure(Path(args.out), xla=args.xla, jobs=args.jobs, limit_mib=args.limit_mib, repeats=args.repeats,
            deadline_s=args.deadline_s, names=args.names, planned=args.planned, seed=args.seed,
            planned_set=args.planned_set, dump_root=args.dump_root)


if __name__ == "__main__":
    main()
