"""Orders: one ORM row and the two jobs it owes, committed with the stored answer."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from examples.fastapi_orders.jobs import app as jobs
from examples.fastapi_orders.models import Order
from examples.fastapi_orders.state import current_user, pigeon, session
from pigeon.integrations.fastapi import defer

router = APIRouter()


class OrderIn(BaseModel):
    # Strict: pydantic's lax mode would take true as 1 cent and "350" as 350.
    model_config = ConfigDict(strict=True)

    item: str = Field(min_length=1, max_length=255)
    amount_cents: int = Field(gt=0)


class OrderOut(BaseModel):
    id: int
    owner: str
    item: str
    amount_cents: int
    status: str


@router.post("/orders", status_code=201)
@pigeon.idempotent
def place_order(
    order: OrderIn,
    db: Annotated[Session, Depends(session)],
    user: Annotated[str, Depends(current_user)],
) -> OrderOut:
    row = Order(owner=user, item=order.item, amount_cents=order.amount_cents, status="placed")
    db.add(row)
    db.flush()  # the id, for the jobs
    payload = {"order_id": row.id, "amount_cents": row.amount_cents}
    defer(db, queue="payments", task="charge", payload=payload, app=jobs)
    defer(
        db,
        queue="notifications",
        task="notify",
        payload={"order_id": row.id, "owner": user},
        app=jobs,
    )
    return OrderOut.model_validate(row, from_attributes=True)


@router.get("/orders/{order_id}")
def get_order(
    order_id: int,
    db: Annotated[Session, Depends(session)],
    user: Annotated[str, Depends(current_user)],
) -> OrderOut:
    row = db.get(Order, order_id)
    if row is None or row.owner != user:
        raise HTTPException(404, f"no order {order_id}")
    return OrderOut.model_validate(row, from_attributes=True)
