"""What the options objects share: folding the keyword arguments they replace into them,
with a DeprecationWarning, for one release."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Opts = TypeVar("Opts", bound="DataclassInstance")


def with_legacy(
    options: Opts,
    legacy: Mapping[str, Any],
    *,
    owner: str,
    param: str = "options",
    stacklevel: int = 3,
) -> Opts:
    """``options`` with the old keyword arguments ``legacy`` of ``owner`` applied on top,
    warning that they are deprecated; an unknown one is the TypeError Python would raise.
    The new object is validated like any other (its ``__post_init__``)."""
    if not legacy:
        return options
    unknown = sorted(set(legacy) - {f.name for f in dataclasses.fields(options)})
    if unknown:
        raise TypeError(f"{owner}() got an unexpected keyword argument {unknown[0]!r}")
    names = ", ".join(f"{name}=" for name in legacy)
    warnings.warn(
        f"{owner}({names}) is deprecated and will be removed in the next release: "
        f"pass {param}={type(options).__name__}({names}) instead",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return dataclasses.replace(options, **legacy)
