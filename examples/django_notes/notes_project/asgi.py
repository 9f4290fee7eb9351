"""The ASGI application (``python manage.py serve`` runs it on uvicorn)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "notes_project.settings")
application = get_asgi_application()
