"""Moved to ``pigeon.reference.faultproxy`` (the reference application left the library's core).

This path keeps working for one release, with a DeprecationWarning."""

import sys
import warnings

from pigeon.reference import faultproxy as _moved

warnings.warn(
    "pigeon.server.faultproxy moved to pigeon.reference.faultproxy"
    "; the old path goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved
