"""The test run's secret key, set before Django reads its settings (a `-p` plugin in pyproject.toml).

Outside debug the settings refuse to start without DJANGO_SECRET_KEY, and the suite runs with
debug off, as deployed. Unless the environment names one, each run makes a throwaway key and puts
it in the environment, so the processes the tests start (qcluster, gunicorn, manage.py) verify
what the tests sign, and the reverse. The canary is off likewise (SAS_CANARY_SECONDS=0), and
/metrics is answered anew at each scrape (SAS_METRICS_CACHE_SECONDS=0).
"""

from __future__ import annotations

import os
import secrets

os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
# The canary (on in the settings, for production) is off for the suite and the processes it
# starts, unless a test turns it on (tests/supervisor/test_canary.py).
os.environ.setdefault("SAS_CANARY_SECONDS", "0")
# Each scrape reads the database anew, so that a test reads the figures it has just made (the
# cache has its own test in tests/supervisor/test_operations.py).
os.environ.setdefault("SAS_METRICS_CACHE_SECONDS", "0")
