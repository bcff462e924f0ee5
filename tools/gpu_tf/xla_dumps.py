"""What XLA compiled on the GPU machine for each measured step, read from its dump.

    python3 tools/gpu_tf/xla_dumps.py DUMP_ROOT OUT.json

``tools/measure_gpu_tf.py --dump-root DUMP_ROOT`` has TensorFlow's XLA write each step's
compiled module with its buffer assignment (``--xla_dump_hlo_as_proto``) into a folder of its
own. This reads, in each folder, the largest module after optimizations (the training step)
with the same reader as the plan (``calc.xla.assignment``), and writes one small JSON file:
per step, XLA's temporaries, arguments and outputs as the card's compile placed them, the
cuDNN workspaces live at the temporaries' peak (what the deviceless plan, compiled with the
autotuner off, has none of), and how many instructions XLA rematerialised (their names end
in ``.remat``). Set against the plan of the same step, it tells whether the card's compile
rematerialised where the plan did, and what its autotuner added.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from calc.xla.assignment import read_hlo_proto
from calc.xla.peak import explain_assignment

PATTERN = "*after_optimizations*.hlo.pb"


def summary(hlo_proto: bytes) -> dict[str, Any]:
    """One compiled module's buffer assignment, summed by what each allocation holds."""
    instructions, assignment = read_hlo_proto(hlo_proto)
    allocations = assignment.allocations
    at_peak = explain_assignment(instructions, assignment, optimizer=frozenset(), state_layers={},
                                 leaf_layers=frozenset())
    return {
        "temporaries_bytes": sum(a.size for a in allocations if a.is_temporary),
        "argument_bytes": sum(a.size for a in allocations if a.is_parameter),
        "output_only_bytes": sum(a.size for a in allocations if a.maybe_live_out and not a.is_parameter),
        "workspace_at_peak_bytes": at_peak["kinds"]["workspace"],
        "rematerialised_instructions": sum(".remat" in i.name for i in instructions.values()),
        "instructions": len(instructions),
        "moment": at_peak["moment"]["instruction"],
    }


def read_dumps(root: Path) -> dict[str, dict[str, Any]]:
    """Each step's folder under ``root`` -> the summary of its largest module (a folder without one is left out)."""
    out: dict[str, dict[str, Any]] = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        modules = sorted(folder.glob(PATTERN), key=lambda f: f.stat().st_size)
        if modules:
            out[folder.name] = {"module": modules[-1].name[:120], **summary(modules[-1].read_bytes())}
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip())
        return 2
    root, out = Path(argv[0]), Path(argv[1])
    found = read_dumps(root) if root.is_dir() else {}
    out.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    for name, s in found.items():
        print(f"{name[:70]:70s} temp {s['temporaries_bytes'] / 2**20:9.1f} MiB  workspace at peak "
              f"{s['workspace_at_peak_bytes'] / 2**20:7.1f} MiB  remat {s['rematerialised_instructions']}")
    print(f"{len(found)} steps -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
