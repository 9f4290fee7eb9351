#!/usr/bin/env python
"""Django's command line for the notes example: ``python manage.py serve``."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "notes_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
