"""The order of the forward pass as TensorFlow's executor runs it (one inter-op thread)."""

from __future__ import annotations

from collections import deque

from calc.facts.layers import layer_rule


def executor_order(layers, producer, onednn: bool = False, twin_of: dict[int, int] | None = None) -> list[int]:
    """The order of the forward pass as TensorFlow's executor runs it (one inter-op thread).

    Keras traces the layers breadth first (by depth from the output), but the executor
    runs one op and then one of the ops it made ready, queueing the others: a fork
    runs one branch to its end (its join waits) before the next. Which branch first
    is measured, not derived: the first in Keras' order (a fork of two 1x1-conv
    branches, ``archive/probes/probe_inference.py --size 56 --channels 32
    conv:32:1:1:v:0,fork:4``, measured 54 / 92 MiB at b16 / b32: one expanded tensor at a
    time; Xception's residual conv runs after the main branch, as measured; the other way
    round Xception 224 px b16 frozen was -22 %).

    ``onednn`` (the CPU): an op that oneDNN's layout pass rewrote (``onednn_rewritten``)
    runs before one it did not. The executor runs the last op in its node's out-edge list
    inline and queues the others (tensorflow/core/common_runtime/executor.cc
    ``ScheduleReady``), and a rewritten op's edge is added after the others when the pass
    replaces the node. Traced (``tools/trace_step.py
    "ResNet101V2-224x224x3-head1000 b24 sgd float32 frozen"``): at the end of each stage
    the shortcut's MaxPooling2D runs before the next block's BatchNormalization, which
    then normalizes the block input in place instead of into a new tensor. Between two
    rewritten ops (Xception's residual conv and separable conv) the first in Keras' order
    still runs first.

    ``twin_of`` (the CPU): a layer that common-subexpression elimination merged into an
    earlier twin (``mergeable``) hands its consumers to the twin, as TensorFlow's CSE
    adds the duplicate's out-edges to the node it keeps, after that node's own. For such
    a node the out-edge list is modelled whole: its own consumers (in reverse of Keras'
    order, which gives the order above), then the merged ones, the rewritten ops moved to
    the end; the executor runs the last and then the others last-in first-out (each is
    expensive on the CPU: one runs inline, the rest are queued to the one inter-op
    thread, whose queue pops the newest first). Traced (``tools/trace_step.py
    "NASNetMobile-224x224x3-head1000 b12 sgd float32 frozen"``): the stem's relu (one
    node for the five relus of its two cells) runs the second cell's 1x1 average pool
    first, then the first cell's 1x1 conv and its branches, then the second cell's pad
    and crop, while the relu still waits for the first cell's 7x7 and 5x5 branches; this
    order reproduces the traced one for its first 16 layers. The peak is the stem's map,
    its pad and its crop alive together. A holdout of 12 NASNet frozen steps was
    predicted before it was measured (median 2.2 %, max 12.2 %). Not on a GPU, whose
    executor runs inexpensive kernels inline in first-in first-out order (the two H100
    NASNet steps fit worse with it).
    """
    n = len(layers)
    succ: list[list[int]] = [[] for _ in range(n)]
    pending = [0] * n
    twin_of = twin_of if onednn and twin_of else {}
    merged_in: dict[int, list[int]] = {}  # a kept twin -> the consumers its duplicates handed it
    for i, layer in enumerate(layers):
        for p in dict.fromkeys(producer[t] for t in layer.input_ids):
            if p != -1:
                if p in twin_of:
                    merged_in.setdefault(twin_of[p], []).append(i)
                else:
                    succ[p].append(i)
                pending[i] += 1
    rewritten_op = [layer_rule(layer.layer_type).onednn_rewritten for layer in layers]
    for j, extra in merged_in.items():
        out = succ[j][::-1] + extra
        out = [x for x in out if not rewritten_op[x]] + [x for x in out if rewritten_op[x]]
        succ[j] = out[::-1]  # the order they run in: the last out-edge first, then LIFO
    pool = deque(i for i in range(n) if not pending[i])
    order: list[int] = []
    while pool:
        node: int | None = pool.popleft()
        while node is not None:
            order.append(node)
            ready = []
            for s in succ[node]:
                pending[s] -= 1
                if not pending[s]:
                    ready.append(s)
            ready.reverse()
            rewritten = ([k for k, r in enumerate(ready) if rewritten_op[r]]
                         if onednn and node not in merged_in else [])
            if rewritten:
                ready.append(ready.pop(rewritten[-1]))  # the first rewritten one runs next
            node = ready.pop() if ready else None  # the first made ready runs next
            pool.extendleft(ready)  # the others wait at the front, the second first
    # Rows that read each other (no graph Keras builds) are walked in the ledger's order.
    return order if len(order) == n else list(range(n))
