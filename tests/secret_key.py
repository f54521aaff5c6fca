"""The test run's secret key, set before Django reads its settings (a `-p` plugin in pyproject.toml).

Outside debug the settings refuse to start without DJANGO_SECRET_KEY, and the suite runs with
debug off, as deployed. Unless the environment names one, each run makes a throwaway key and puts
it in the environment, so the processes the tests start (qcluster, gunicorn, manage.py) verify
what the tests sign, and the reverse.
"""

from __future__ import annotations

import os
import secrets

os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
