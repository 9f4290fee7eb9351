"""Moved to ``pigeon.reference.lww`` (the reference application left the library's core).

This path keeps working for one release, with a DeprecationWarning."""

import sys
import warnings

from pigeon.reference import lww as _moved

warnings.warn(
    "pigeon.server.lww moved to pigeon.reference.lww; the old path goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved
