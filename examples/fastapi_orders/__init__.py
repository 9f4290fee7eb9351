"""Orders and notes on FastAPI + SQLAlchemy 2, exactly once with pigeon (see README.md)."""
