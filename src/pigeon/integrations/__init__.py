"""pigeon inside the application's own transaction, for the web frameworks it runs on.

`pigeon.integrations.claims` is the framework-neutral core: the intake's rules (claim,
fingerprint, principal scope, replay, 409 in progress, 422 mismatch, what is stored and
what frees the key) applied through the application's own connection, so that its ORM
writes, the jobs it defers and the stored response commit together. Each framework's
package adapts its requests and sessions to it: `pigeon.integrations.fastapi`
(FastAPI + SQLAlchemy 2, the ``fastapi`` extra).
"""
