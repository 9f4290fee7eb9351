"""Moved to ``pigeon.reference.jobs`` (the reference application left the library's core).

This path keeps working for one release, with a DeprecationWarning."""

import sys
import warnings

from pigeon.reference import jobs as _moved

warnings.warn(
    "pigeon.jobs.demo moved to pigeon.reference.jobs; the old path goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved
