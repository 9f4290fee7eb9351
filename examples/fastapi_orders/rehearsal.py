"""What ``pigeon rehearse`` needs to know of the FastAPI example: the orders it places,
and the table they go to.

    pigeon rehearse --app examples.fastapi_orders.app:serve \
        --jobs examples.fastapi_orders.jobs:app --hooks examples.fastapi_orders.rehearsal:hooks
"""

from __future__ import annotations

import random

from pigeon.rehearse import RehearsalHooks

ITEMS = ("tea", "coffee", "cake")


def order(n: int, rng: random.Random) -> dict[str, object]:
    return {"item": rng.choice(ITEMS), "amount_cents": 100 + n}


hooks = RehearsalHooks(requests={"POST /orders": order}, tables=("orders",))
