"""A saved model's profile, read in a fresh child process with Keras safe mode on.

The child (job ``profile-file`` of ``calc.workers.child``) loads the file without its
compile state and without registering any custom object (``calc.keras.build``), so the
file cannot run code while it loads; it runs under a time limit, and whatever goes wrong
in it is a ``ValueError`` here with a reason for the user.
"""

from __future__ import annotations

from calc.profile_json import profile_from_dict
from calc.types import ModelProfile
from calc.workers.budgets import budget_bytes, gib
from calc.workers.protocol import child_env, run_once


def profile_file(path: str, *, timeout_s: float, max_rss_bytes: int | None = None) -> ModelProfile:
    """The ledger of the saved model at ``path``.

    Args:
        max_rss_bytes: the reader's memory budget (default: ``budget_bytes("reader")``).

    Raises:
        ValueError: Keras refused the file (the reason), the child ran past ``timeout_s``
            or its memory budget, or it ended without an answer (a damaged file).
    """
    budget = budget_bytes("reader") if max_rss_bytes is None else max_rss_bytes
    reply = run_once("profile-file", {"path": path}, env=child_env(), timeout_s=timeout_s,
                     max_rss_bytes=budget).reply
    if reply.failure == "time":
        raise ValueError(f"Reading the model took more than {timeout_s:.0f} s and was stopped.")
    if reply.failure == "memory":
        raise ValueError(f"Reading the model passed the reader's memory budget of {gib(budget)} and was stopped: "
                         "the model is too large to read here (its weights alone may be larger).")
    if reply.refusal is not None:
        raise ValueError(reply.refusal)
    if reply.failure:
        raise ValueError("The model could not be read (the reader stopped: out of memory or a damaged file).")
    return profile_from_dict(reply.answer)
