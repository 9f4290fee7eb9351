"""Imported first by the package: without the ``django`` extra, one line naming it."""

from pigeon.extras import require_extra

require_extra("django", "pigeon.integrations.django")
# The intake's rules are the server's code: the extra pulls ``pigeon[server]`` in.
require_extra("server", "pigeon.integrations.django")
