"""The project's settings with django-q2's stock ORM broker: what `bench` runs its bare django-q2
baseline on (`DJANGO_SETTINGS_MODULE=testbed.stock_settings`), every other value unchanged."""

from sas_project.settings import *  # noqa: F403
from sas_project.settings import Q_CLUSTER

Q_CLUSTER = {**Q_CLUSTER, "broker_class": "django_q.brokers.orm.ORM"}
