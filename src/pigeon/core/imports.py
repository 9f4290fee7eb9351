"""What ``--app module:attr`` names, imported: one reading of such a reference for every
command that takes one (``pigeon serve --app``, ``pigeon worker --app``, ``pigeon jobs
stats --app``), with one message for each thing that can be wrong with it.

The current directory is searched first (`add_app_dir`), as uvicorn does, so
``--app myapp:make`` finds ``./myapp.py``.
"""

from __future__ import annotations

import importlib
import os
import sys

from pigeon.exceptions import ConfigurationError


def add_app_dir(app_dir: str | os.PathLike[str] | None) -> str | None:
    """Put ``app_dir`` (made absolute) first on ``sys.path`` unless it is there already, as
    uvicorn's ``--app-dir`` does, so that ``--app myapp:app`` imports the ``myapp.py``
    found there; the absolute path, or None when no directory is given."""
    if app_dir is None:
        return None
    path = os.path.abspath(app_dir)
    if path not in sys.path:
        sys.path.insert(0, path)
    return path


def import_ref(ref: str, what: str = "app") -> object:
    """The object ``"package.module:attr"`` names; a ConfigurationError naming ``ref`` for a
    reference that is not dotted Python names around one colon (``../../etc/passwd:app``
    is no module name; importlib would take the dots for a relative import), a module that
    cannot be imported or raises while it is (the application's own code: a SyntaxError,
    a missing setting; its first line only), or a module without that attribute."""
    module_name, colon, attr = ref.partition(":")
    parts = module_name.split(".")
    if not colon or not attr.isidentifier() or not all(part.isidentifier() for part in parts):
        raise ConfigurationError(
            f"{what} path must look like 'package.module:attr' (Python names), got {ref!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"cannot import {module_name!r} for {what} {ref!r}: {exc}"
        ) from exc
    except Exception as exc:  # the module's own code raised while it was imported
        raise ConfigurationError(
            f"importing {module_name!r} for {what} {ref!r} raised "
            f"{type(exc).__name__}: {exc}".splitlines()[0]
        ) from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigurationError(
            f"module {module_name!r} has no attribute {attr!r} (the {what} {ref!r})"
        ) from None
