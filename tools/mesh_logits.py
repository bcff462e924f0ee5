"""How much of a causal LM's logits one card of a mesh holds, as XLA's SPMD partitioner lays them out.

The verdict keeps one buffer of the step's logits free beside the plan (``calc.xla.kept``: XLA's autotuner
took one that size on an H200, one card); the autotuner tunes each card's own partitioned program, so on a
mesh the buffer is one card's logits. This compiles each family whose keras-hub layout map shards it (Gemma,
Qwen with its head tied to the token embedding or not, Llama 3) at toy size (2 layers of 64, 1,024 words,
4 heads: the layout map's divisions hold) on data x model meshes of L4 cards, with LoRA 4, 2 sequences of
32 tokens a replica, float32, and reads from the partitioned module the output of the head's matrix product
(``jvp(token_embedding)/dot_general``) on one card. Prints its elements against one replica's logits
(2 x 32 x 1,024 = 65,536); ``calc.xla.kept`` keeps DATA / MODEL of them where the head is tied.

    python tools/mesh_logits.py                 # every family on 1x2, 1x4, 2x1, 2x2, 2x4, 4x2
    python tools/mesh_logits.py --meshes 1x2    # fewer meshes

Runs in a plan worker's environment (Keras on JAX, compiling for CUDA without a GPU): about 10 s a mesh.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VOCABULARY, TOKENS, PER_REPLICA = 1024, 32, 2
FIGURES = dict(vocabulary_size=VOCABULARY, num_layers=2, num_query_heads=4, num_key_value_heads=4, hidden_dim=64,
               intermediate_dim=128)
FAMILIES = {  # name: (keras-hub family, backbone figures, whether the head is the token embedding, tied)
    "Gemma": ("Gemma", {**FIGURES, "head_dim": 16}, True),
    "Qwen, tied": ("Qwen", {**FIGURES, "tie_word_embeddings": True}, True),
    "Qwen, untied": ("Qwen", {**FIGURES, "tie_word_embeddings": False}, False),
    "Llama 3": ("Llama3", FIGURES, False),
}
MESHES = ("1x2", "1x4", "2x1", "2x2", "2x4", "4x2")
HEAD_PRODUCT = "jvp(token_embedding)/dot_general"


def head_elements(module_text: str) -> int:
    """The most elements of any output of the head's matrix product in an HLO module's text."""
    best = 0
    for line in module_text.splitlines():
        if HEAD_PRODUCT in line and (shape := re.search(r"= \w+\[([0-9,]*)\]", line)):
            elements = 1
            for d in filter(None, shape.group(1).split(",")):
                elements *= int(d)
            best = max(best, elements)
    return best


def one(name: str, mesh: str) -> int:
    """In this process (a plan worker's environment): the head's per-card elements of ``name`` on ``mesh``."""
    import calc.hub
    import calc.keras.plan
    from calc.hub import HubModel, HubSpec
    from calc.keras.hub import HubPlanModel
    from calc.types import TrainingConfig
    from calc.xla.targets import target_for

    family, figures, _ = FAMILIES[name]
    calc.hub.hub_models = lambda: {name: HubModel(name, family, "causal_lm", 0, "", figures)}
    calc.keras.plan._dump_folder = lambda: None  # the module stays where XLA dumped it
    data, model = map(int, mesh.split("x"))
    config = TrainingConfig(batch_size=PER_REPLICA * data, num_gpus=data, model_parallel=model, device="gpu")
    HubPlanModel(HubSpec(name, TOKENS, 4, "float32"), config).plan(PER_REPLICA, target_for("l4").config_text())
    dumped = next(Path(os.environ["CALC_XLA_DUMP"]).glob("*after_optimizations.txt"))
    return head_elements(dumped.read_text())


def per_card(name: str, mesh: str) -> int | str:
    """The head's per-card elements of family ``name`` on ``mesh``, compiled in a child in a plan worker's
    environment with the module dumped; the child's last line of error where it fails."""
    from calc.workers.plans import plan_env

    with tempfile.TemporaryDirectory(prefix="mesh-logits-") as dump:
        env = plan_env(dump)
        env["XLA_FLAGS"] += " --xla_dump_hlo_as_text"
        done = subprocess.run([sys.executable, __file__, "--one", name, mesh], env=env, capture_output=True,
                              text=True, check=False)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["no message"])[-1]
    return int(done.stdout.split()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--meshes", default=",".join(MESHES), help="DATAxMODEL meshes, comma-separated")
    parser.add_argument("--one", nargs=2, metavar=("FAMILY", "MESH"), help=argparse.SUPPRESS)  # the child's part
    args = parser.parse_args()
    if args.one:
        print(one(*args.one))
        return 0
    replica = PER_REPLICA * TOKENS * VOCABULARY
    print(f"one replica's logits: {PER_REPLICA} x {TOKENS} x {VOCABULARY:,} = {replica:,} elements "
          "(a card's share: DATA/MODEL of them where the head is tied, calc.xla.kept)")
    print(f"{'family':14s} {'head tied':9s} {'mesh':5s} {'one card holds':>15s} {'x replica':>9s}")
    for name, (_, _, tied) in FAMILIES.items():
        for mesh in args.meshes.split(","):
            elements = per_card(name, mesh)
            if isinstance(elements, str):
                print(f"{name:14s} {mesh}: failed: {elements}")
                continue
            print(f"{name:14s} {'yes' if tied else 'no':9s} {mesh:5s} {elements:15,} {elements / replica:9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
