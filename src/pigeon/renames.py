"""Old names kept for one release after a rename, each with a DeprecationWarning.

A module that renamed a public name sets ``__getattr__ = renamed(__name__, {"Old": "New"},
globals())``: Python calls it only for names the module does not have, so the new name
costs nothing and the old one warns where it is used (``stacklevel=2``: the caller's line).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any


def renamed(
    module: str, names: Mapping[str, str], namespace: Mapping[str, Any]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` resolving each old name of ``names`` to its new one."""

    def __getattr__(name: str) -> Any:
        new = names.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name} is deprecated: use {module}.{new} (the old name goes in the "
            "next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return namespace[new]

    return __getattr__
