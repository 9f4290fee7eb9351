"""Imported first by the package: without the ``server`` extra, one line naming it."""

from pigeon.extras import require_extra

require_extra("server", "pigeon.ops (the operations page)")
