"""The Django project: settings, URLs, the WSGI/ASGI entry points and what every app shares."""

#: The service's version (pyproject.toml's, kept equal by tests/docs/test_docs.py): shown by the
#: clusters' heartbeats.
VERSION = "0.1.0"
