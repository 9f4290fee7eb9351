"""The timeout hierarchy of a job, checked when it is configured (like ``httpx.Timeout``).

external call deadline < job timeout < supervisor timeout < lease

Each level must give the one below it room to fail first: an external call times out
inside the job, a job that overruns is given up before the supervisor has to kill its
process, and a lease outlives a killed process so no other worker runs the job while the
stuck one may still be touching it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from pigeon.exceptions import ConfigurationError

_ORDER = ("external_call", "job", "supervisor", "lease")


@dataclass(frozen=True)
class Timeouts:
    """Seconds for each level. ``Timeouts(30)`` derives a valid hierarchy from a job timeout."""

    job: float = 30.0
    external_call: float | None = None
    supervisor: float | None = None
    lease: float | None = None

    def __post_init__(self) -> None:
        if self.external_call is None:
            object.__setattr__(self, "external_call", self.job / 2)
        if self.supervisor is None:
            object.__setattr__(self, "supervisor", self.job * 1.5)
        if self.lease is None:
            object.__setattr__(self, "lease", self.supervisor_seconds * 1.5)
        values = self.as_dict()
        for name, value in values.items():
            if not value > 0:
                raise ConfigurationError(f"timeout {name}={value!r} must be a positive number")
        for low, high in itertools.pairwise(_ORDER):
            if not values[low] < values[high]:
                raise ConfigurationError(
                    "timeouts must satisfy external_call < job < supervisor < lease; "
                    f"got {low}={values[low]:g} which is not below {high}={values[high]:g} "
                    f"(external_call={values['external_call']:g}, job={values['job']:g}, "
                    f"supervisor={values['supervisor']:g}, lease={values['lease']:g})"
                )

    @property
    def external_call_seconds(self) -> float:
        assert self.external_call is not None
        return self.external_call

    @property
    def supervisor_seconds(self) -> float:
        assert self.supervisor is not None
        return self.supervisor

    @property
    def lease_seconds(self) -> float:
        assert self.lease is not None
        return self.lease

    def as_dict(self) -> dict[str, float]:
        return {
            "external_call": self.external_call_seconds,
            "job": self.job,
            "supervisor": self.supervisor_seconds,
            "lease": self.lease_seconds,
        }
