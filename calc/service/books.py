"""The service's books, as plain data: a session's wants, a task some want needs, a task in the engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from calc.catalogue import ModelSpec
from calc.service.wants import Setup, Want


@dataclass
class Session:
    """What one session (a tab) waits for, until its lease lapses."""

    wants: tuple[Want, ...] = ()
    expires_s: float = 0.0
    since_s: dict[Want, float] = field(default_factory=dict)  # when each want was first asked
    client: str = ""  # the visitor's address (``dashboard.xla_step.client_address``)


@dataclass
class Wanted:
    """A task some live want needs now."""

    urgency: int
    since_s: float  # the earliest want behind it was first asked then
    session: str  # that want's session
    client: str
    whats: set[Setup | ModelSpec]  # what the pages behind it redraw when it ends
    explain: bool = False  # an EXPLAIN want is behind it: a plan without what fills its peak fails it


@dataclass
class Submitted:
    """A task handed to the engine."""

    key: str
    future: Any
    priority: int
    seq: int  # submission order here (the engine's order among equal priorities)
    session: str
    urgency: int
    whats: set[Setup | ModelSpec]
    explain: bool = False
