"""Storage backends: SQLite (embedded default) and PostgreSQL (many nodes).

Every backend keeps its SQL in named blocks in ``.sql`` files under ``sql/<backend>/``;
code asks for a query by name, so the SQL for one backend can be read in one place.
"""
