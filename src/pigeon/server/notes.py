"""Moved to ``pigeon.reference.notes`` (the reference application left the library's core).

This path keeps working for one release, with a DeprecationWarning."""

import sys
import warnings

from pigeon.reference import notes as _moved

warnings.warn(
    "pigeon.server.notes moved to pigeon.reference.notes; the old path goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved
