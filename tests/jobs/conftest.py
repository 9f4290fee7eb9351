"""Every jobs test opens its database through ``db`` / ``server_db_url``
(tests/databases.py): it runs on both backends."""
