"""The jobs an order owes: a payment and a notification, run by ``pigeon worker --app
examples.fastapi_orders.jobs:app --db ...`` on the app's database (where its routes
defer them: a worker on another database would find none)."""

from __future__ import annotations

import logging

from pigeon import jobs
from pigeon.storage.base import Tx

log = logging.getLogger(__name__)
app = jobs.App()
app.queue("payments")
app.queue("notifications")
PAID = {
    "sqlite": "UPDATE orders SET status = 'paid' WHERE id = :id",
    "postgres": "UPDATE orders SET status = 'paid' WHERE id = %(id)s",
}


@app.task(queue="payments", max_attempts=5, context=True)
def charge(ctx: jobs.JobContext, order_id: int, amount_cents: int) -> None:
    """Charge the order once, whatever the attempts: the order marked paid and the key
    claimed in one transaction of the job's own database (a provider call would carry
    the order id as its reference, `JobContext.call_provider`)."""

    def paid(tx: Tx) -> int:
        return int(tx.sql(PAID[tx.backend], {"id": order_id}).rowcount)

    if ctx.effect(f"order-{order_id}", paid):
        log.info("order %s charged %s cents", order_id, amount_cents)


@app.task(queue="notifications")
def notify(order_id: int, owner: str) -> None:
    log.info("told %s that order %s is placed", owner, order_id)
