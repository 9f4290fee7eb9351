"""Task payload versions: a task declares the version of its payload's shape, its jobs
carry the version they were enqueued with, and a worker brings an older payload up to the
task's version through the upcasters the task declares.

    @app.task(queue="billing", version=3, upcast={1: v1_to_v2, 2: v2_to_v3})
    def charge(order_id: str, amount: dict) -> None: ...

``upcast[n]`` takes a version-``n`` payload and returns the version-``n + 1`` one: a job
enqueued at version 1 runs as ``v2_to_v3(v1_to_v2(payload))``. The upcasters must form a
chain without gaps ending at ``version - 1`` (checked at registration); a chain may start
later than 1, when the payloads before it are known to be gone: a job older than the
chain's start fails for good, naming the task and both versions. A job *newer* than the
task's version is never run nor failed: the worker's claim does not take it (it knows no
such version), and it waits for a worker that does (``pigeon jobs stats`` counts it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pigeon.checks import is_int_in
from pigeon.exceptions import ConfigurationError, UpcastFailed

# A version-n payload -> the version-(n + 1) one.
Upcaster = Callable[[dict[str, Any]], Mapping[str, Any]]


def checked_version(task: str, version: object) -> int:
    """A task's declared payload version: an int >= 1 (bool is no version)."""
    if not is_int_in(version, 1):
        raise ConfigurationError(f"task {task!r}: version must be an int >= 1, got {version!r}")
    return version


@dataclass(frozen=True)
class PayloadVersions:
    """A task's payload version and the upcasters that bring older payloads to it."""

    task: str
    version: int = 1
    upcasters: Mapping[int, Upcaster] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def declare(
        cls, task: str, version: object = 1, upcast: Mapping[int, Upcaster] | None = None
    ) -> PayloadVersions:
        """Check a task's ``version=`` and ``upcast=`` (ConfigurationError naming what is
        wrong: a step missing from the chain, a step from a version that is not older, an
        upcaster that is not callable)."""
        number = checked_version(task, version)
        if not isinstance(upcast, Mapping | None):
            raise ConfigurationError(
                f"task {task!r}: upcast must map a version to its upcaster, got {upcast!r}"
            )
        steps = dict(upcast or {})
        bad = [k for k in steps if not is_int_in(k, 1, number - 1)]
        if bad:
            raise ConfigurationError(
                f"task {task!r} is version {number}: upcast from version {bad[0]!r} is not an "
                f"older version (upcasters go from 1..{number - 1} to the next one)"
            )
        if steps:
            missing = [n for n in range(min(steps), number) if n not in steps]
            if missing:
                raise ConfigurationError(
                    f"task {task!r} is version {number} and upcasts from version "
                    f"{min(steps)}, but declares no upcaster from version "
                    f"{', '.join(map(str, missing))} to the next"
                )
        for n, step in steps.items():
            if not callable(step):
                raise ConfigurationError(f"task {task!r}: the upcaster from {n} is not callable")
        return cls(task, number, MappingProxyType(steps))

    @property
    def oldest(self) -> int:
        """The oldest payload version this task can still run."""
        return self.version - len(self.upcasters)

    def knows(self, version: int) -> bool:
        """Is ``version`` one this task can run (its own, or upcast to it)?"""
        return self.oldest <= version <= self.version

    def chain(self, version: int) -> list[int]:
        """The upcasters (by the version each starts from) that bring a version-``version``
        payload to the task's, in order. UpcastFailed if there is no way from it."""
        if version > self.version:
            raise UpcastFailed(
                f"task {self.task!r} payload version {version} is newer than this worker's "
                f"{self.version}"
            )
        if version < self.oldest:
            raise UpcastFailed(
                f"task {self.task!r} has no upcaster from payload version {version} (it is "
                f"version {self.version} and upcasts from version {self.oldest} on)"
            )
        return list(range(version, self.version))

    def upcast(self, payload: Mapping[str, Any], version: int) -> dict[str, Any]:
        """``payload`` (of ``version``) as a payload of the task's version. Whatever an
        upcaster raises, or a result that is not an object with str keys, is UpcastFailed:
        the same payload would fail the same way on every attempt."""
        current = dict(payload)
        for step in self.chain(version):
            try:
                result = self.upcasters[step](current)
            except Exception as exc:
                raise UpcastFailed(
                    f"task {self.task!r}: upcasting its payload from version {step} to "
                    f"{step + 1} raised {type(exc).__name__}: {exc}"
                ) from exc
            if not isinstance(result, Mapping) or not all(isinstance(k, str) for k in result):
                raise UpcastFailed(
                    f"task {self.task!r}: the upcaster from version {step} returned "
                    f"{type(result).__name__}, not an object with str keys"
                )
            current = dict(result)
        return current


__all__ = ["PayloadVersions", "Upcaster", "checked_version"]
