"""The settings mypy's Django plugin reads (pyproject.toml, `[tool.django-stubs]`).

The type checker imports the settings to learn the models and apps; it serves nothing and signs
nothing, so it needs no secret key: it reads them as a developer's machine does, with debug on.
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_DEBUG", "1")

from sas_project.settings import *  # noqa: F403
