"""What one recurrent layer's training step holds on this machine, from the allocator's trace.

    python benchmarks/probe_recurrent.py {lstm,gru,rnn} UNITS STEPS FEATURES BATCH [seq]

Saves a one-layer model (Input(STEPS, FEATURES) -> LSTM / GRU / SimpleRNN(UNITS), then a
Dense(4) head; ``seq``: ``return_sequences=True`` and a global average pool) under
``$TMPDIR``, runs the measurement protocol once with TensorFlow's profiler
(``calc.measure.measure_once(..., trace=True)``, SGD, float32), and prints the measured
peak and the tensors alive at it, grouped by op and shape. Only requests of 256 KiB and
up appear (those the CPU allocator's statistics count). docs/MEASUREMENTS.md, stop 18:
``lstm 512 50 32 256`` shows seven [256, 512] tensors kept per time step.
"""

from __future__ import annotations

import collections
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from calc.catalogue import ModelFile  # noqa: E402
from calc.measure import measure_once  # noqa: E402
from calc.types import TrainingConfig  # noqa: E402

MIB = 2 ** 20


def main() -> None:
    if len(sys.argv) < 6 or sys.argv[1] not in ("lstm", "gru", "rnn"):
        sys.exit(__doc__.strip().splitlines()[2].strip())
    kind = sys.argv[1]
    units, steps, features, batch = (int(a) for a in sys.argv[2:6])
    seq = len(sys.argv) > 6 and sys.argv[6] == "seq"
    path = os.path.join(tempfile.gettempdir(), f"probe_{kind}_{units}_{steps}_{features}_{'seq' if seq else 'last'}.keras")
    if not os.path.exists(path):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        import keras
        layers = keras.layers
        inp = keras.Input((steps, features))
        x = {"lstm": layers.LSTM, "gru": layers.GRU, "rnn": layers.SimpleRNN}[kind](units, return_sequences=seq)(inp)
        if seq:
            x = layers.GlobalAveragePooling1D()(x)
        keras.Model(inp, layers.Dense(4)(x)).save(path)
    result = measure_once(ModelFile(path), TrainingConfig(batch_size=batch, optimizer="sgd"), trace=True)
    events = result["allocations"]
    print(f"{kind} units={units} steps={steps} features={features} batch={batch} sequences={seq}: "
          f"peak {result['peak_bytes'] / MIB:.2f} MiB, resident before the step {result['current_before_bytes'] / MIB:.2f}")
    live: dict = {}
    best = (0, {}, 0)
    for i, ev in enumerate(events):
        if ev[0] == "a":
            live[ev[3]] = ev
        else:
            live.pop(ev[3], None)
        if ev[2] > best[0]:
            best = (ev[2], dict(live), i)
    _, alive, at = best
    total: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    for ev in alive.values():
        key = f"{re.sub(r'_[0-9]+', '', ev[4].split('/')[-1])} {ev[5]}"
        total[key] += ev[1]
        count[key] += 1
    print(f"  peak at event {at} of {len(events)}: {events[at][4][-90:]} {events[at][5]}")
    for key, nbytes in total.most_common(12):
        print(f"  {nbytes / MIB:8.2f} MiB in {count[key]:4d}  {key}")


if __name__ == "__main__":
    main()
