"""The jobs an order owes: a payment and a notification, run by ``pigeon worker --app
examples.fastapi_orders.jobs:app --db ...`` on the same database."""

from __future__ import annotations

import logging

from sqlalchemy import create_engine, update

from examples.fastapi_orders.models import Order, database_url
from pigeon import jobs

log = logging.getLogger(__name__)
app = jobs.App()
app.queue("payments")
app.queue("notifications")


@app.task(queue="payments", max_attempts=5)
def charge(order_id: int, amount_cents: int) -> None:
    """Charge the order (a provider call would carry the order id as its reference)."""
    engine = create_engine(database_url())
    with engine.begin() as conn:
        conn.execute(update(Order).where(Order.id == order_id).values(status="paid"))
    engine.dispose()
    log.info("order %s charged %s cents", order_id, amount_cents)


@app.task(queue="notifications")
def notify(order_id: int, owner: str) -> None:
    log.info("told %s that order %s is placed", owner, order_id)
