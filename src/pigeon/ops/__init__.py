"""Operations: the 9 a.m. page, its figures (one query module for the page, ``/metrics``,
``pigeon jobs stats`` and the JSON endpoint) and the operator's actions.

    from starlette.routing import Mount
    from pigeon.ops import dashboard_app
    from pigeon.server.access import OperatorToken

    routes = [Mount("/ops", dashboard_app(db, jobs_app, operator=OperatorToken(token)))]
"""

from __future__ import annotations

from pigeon.ops import _extra  # noqa: F401  (first: one line naming the extra)
from pigeon.ops.dashboard import dashboard_app
from pigeon.ops.queries import overview

__all__ = ["dashboard_app", "overview"]
