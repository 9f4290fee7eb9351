"""The components of the intake's OpenAPI document (`pigeon.server.openapi`): the headers
and parameters every operation shares, the wire's schemas (`pigeon.server.contract`'s and
the batch's), and the two kinds of credentials."""

from __future__ import annotations

from typing import Any

from pigeon.core.wire import CLOCK, IDEMPOTENCY_KEY, IF_MATCH, MAX_BATCH, REPLAYED, RETRY_AFTER
from pigeon.server import contract
from pigeon.server.contract import OPERATION_ID

_TEXT = {"type": "string"}


def document_components() -> dict[str, Any]:
    """The parameters, headers, schemas and credentials the operations refer to."""
    return {
        "parameters": _parameters(),
        "headers": _headers(),
        "schemas": _schemas(),
        "securitySchemes": {
            "user": {
                "type": "http",
                "scheme": "bearer",
                "description": "A user's token (`pigeon serve --auth`): names the principal",
            },
            "operator": {
                "type": "http",
                "scheme": "bearer",
                "description": "The operator token (`pigeon serve --operator-token`)",
            },
        },
    }


def _parameters() -> dict[str, Any]:
    return {
        "IdempotencyKey": {
            "name": IDEMPOTENCY_KEY,
            "in": "header",
            "required": True,
            "description": (
                "Made once per operation by the client, resent unchanged on retries (one "
                "header line): 1-255 printable characters, or those in double quotes"
            ),
            "schema": contract.HEADERS[IDEMPOTENCY_KEY],
        },
        "IfMatch": {
            "name": IF_MATCH,
            "in": "header",
            "required": False,
            "description": 'The base version the change was made against: "<n>"; empty: none',
            "schema": contract.HEADERS[IF_MATCH],
        },
        "Clock": {
            "name": CLOCK,
            "in": "header",
            "required": False,
            "description": "The operation's hybrid logical clock stamp, <wall ms>-<counter>-<node>",
            "schema": contract.HEADERS[CLOCK],
        },
        "OperationId": {
            "name": OPERATION_ID,
            "in": "header",
            "required": False,
            "description": "Names the operation in an 'already applied' answer (default: the key)",
            "schema": contract.HEADERS[OPERATION_ID],
        },
    }


def _headers() -> dict[str, Any]:
    return {
        REPLAYED: {
            "description": "true when the answer is a stored one, not a new execution",
            "schema": {"type": "string", "enum": ["true"]},
        },
        RETRY_AFTER: {"description": "Seconds to wait before retrying", "schema": _TEXT},
    }


def _schemas() -> dict[str, Any]:
    return contract.components() | {
        "Problem": {
            "type": "object",
            "required": ["type", "title", "status"],
            "properties": {
                "type": _TEXT,
                "title": _TEXT,
                "status": {"type": "integer"},
                "detail": _TEXT,
            },
        },
        "Batch": {
            "type": "object",
            "required": ["operations"],
            "properties": {
                "operations": {
                    "type": "array",
                    "maxItems": MAX_BATCH,
                    "description": "Entries, each judged against BatchOperation on its own",
                    "items": {},
                }
            },
        },
        "BatchResults": {
            "type": "object",
            "properties": {
                "results": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": ["string", "null"], "description": "The entry's id"},
                            "status": {"type": "integer"},
                            "body": {},
                            "replayed": {"type": "boolean"},
                            "headers": {"type": "object"},
                        },
                    },
                }
            },
        },
    }
