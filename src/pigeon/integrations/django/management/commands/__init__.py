"""``manage.py pigeon_worker``."""
