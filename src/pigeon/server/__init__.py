"""The server: idempotent intake (ASGI), reference notes application, fault proxy."""
