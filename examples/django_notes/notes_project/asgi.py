"""The ASGI application (``python manage.py serve`` runs it on uvicorn), the bodies of
pigeon's routes read under their limits before Django's handler reads them whole."""

import os

from django.core.asgi import get_asgi_application

from pigeon.integrations.django import read_bodies_first

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "notes_project.settings")
application = read_bodies_first(get_asgi_application())
