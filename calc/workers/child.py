"""The child processes' side: ``python -m calc.workers.child JOB``.

Serves requests of one job on stdin, one JSON line each, with one ``ANSWER`` or
``REFUSED`` line each on stdout (``calc.workers.protocol``), until stdin closes. A job
names the exceptions that are its refusal (a reason for the user); any other exception
ends the child, with its traceback on stderr for the parent's failure message.

    measure       one training step measured on TensorFlow (``calc.keras.step``)
    profile-file  a saved model loaded with safe mode on and profiled (``calc.keras.build``)
    plan-xla      XLA's plan of the step for a GPU, compiled on JAX (``calc.keras.plan``), the model kept
"""

from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import dataclass
from typing import Any, Callable, TextIO

from calc.cluster.worker import plan_here
from calc.keras.build import profile_model_file
from calc.keras.step import measure_in_process
from calc.profile_json import profile_to_dict
from calc.requests import config_from_dict, spec_from_dict
from calc.workers.protocol import DIE_WITH_ENV, NICE_ENV, answer_line, refusal_line


def _typed(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


@dataclass(frozen=True)
class Job:
    """What a child does with one request, and which failures are its refusals."""

    run: Callable[[dict[str, Any]], Any]  # the request -> the answer (JSON-able)
    refuses: tuple[type[Exception], ...]  # raised by ``run``: answered REFUSED, the child goes on
    reason: Callable[[BaseException], str] = _typed  # a refusal's one line for the user


def _measure(request: dict[str, Any]) -> dict[str, Any]:
    trace = request.get("trace")
    return measure_in_process(spec_from_dict(request["spec"]), config_from_dict(request["config"]),
                              xla=request.get("xla") is True, trace=trace if trace in (True, "history") else False)


def _profile_file(request: dict[str, Any]) -> dict[str, Any]:
    return profile_to_dict(profile_model_file(str(request["path"])))


JOBS: dict[str, Job] = {
    # A measurement that fails is a crash: the parent reports the child's exit and its last words.
    "measure": Job(_measure, refuses=()),
    # Keras's own message for a file it cannot read safely (``_load_saved``) is the user's answer.
    "profile-file": Job(_profile_file, refuses=(ValueError,), reason=str),
    # A layer XLA cannot compile, a model that cannot be built: the answer (as on a plan worker of the engine).
    "plan-xla": Job(plan_here, refuses=(Exception,)),
}


def serve(job: Job, stdin: TextIO, stdout: TextIO) -> int:
    """The child's loop: one reply line per request line, until stdin closes."""
    for line in stdin:
        if not line.strip():
            continue
        try:
            reply = answer_line(job.run(json.loads(line)))
        except job.refuses as exc:
            reply = refusal_line(job.reason(exc))
        stdout.write(reply)
        stdout.flush()
    return 0


def follow_parent(env: dict[str, str]) -> None:
    """What ``calc.workers.protocol.background_env`` asks: a lower CPU priority, and this process
    ended by the kernel when its parent ends (Linux ``PR_SET_PDEATHSIG``), however the parent ends."""
    try:
        os.nice(max(0, min(19, int(env.get(NICE_ENV, "0")))))
    except (ValueError, OSError):
        pass
    parent = env.get(DIE_WITH_ENV)
    if not parent or not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if str(os.getppid()) != parent:  # the parent ended before the signal was asked for
        os._exit(1)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in JOBS:
        sys.stderr.write(f"usage: python -m calc.workers.child {{{','.join(JOBS)}}}. Received: {argv}\n")
        return 2
    follow_parent(dict(os.environ))
    return serve(JOBS[argv[0]], sys.stdin, sys.stdout)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
