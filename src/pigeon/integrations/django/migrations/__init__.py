"""pigeon's tables as Django migrations: each runs pigeon's own migrations (the same DDL
``pigeon migrate`` and ``open_server_db`` run, per vendor) in Django's transaction."""
