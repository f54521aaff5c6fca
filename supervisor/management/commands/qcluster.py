"""`manage.py qcluster`: django-q2's cluster, with the supervisor loop running beside it.

The cluster (sentinel, pusher, workers, monitor) is started exactly as django-q2 does it; this
process, which django-q2 leaves waiting on the cluster, runs the supervisor loop meanwhile. Every
cluster therefore watches; the lease makes one of them act, and if that cluster dies another takes
over within one lease period. SIGTERM stops the cluster as usual and then the loop, which gives
the lease up. Set SAS_SUPERVISOR_IN_CLUSTER=0 to run the supervisor apart (`manage.py supervise`).
"""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django_q.cluster import Cluster
from django_q.management.commands.qcluster import Command as DjangoQClusterCommand

from sas_project.conf import sas_settings
from supervisor.loop import holder_name, run_loop


class Command(DjangoQClusterCommand):
    help = "Start a django-q2 cluster with the supervisor loop beside it."

    def handle(self, *args: Any, **options: Any) -> None:
        if options.get("run_once") or not sas_settings.supervisor_in_cluster:
            super().handle(*args, **options)
            return
        settings.SECRET_KEY  # noqa: B018 - django-q2 signs tasks with it: fail early without one
        if options.get("cluster_name"):
            os.environ["Q_CLUSTER_NAME"] = options["cluster_name"]
        cluster = Cluster()
        cluster.start()
        # The sentinel is forked before the loop opens any database connection.
        run_loop(
            holder=holder_name("qcluster"),
            should_stop=lambda: cluster.sentinel is None or not cluster.sentinel.is_alive(),
        )
        cluster.stop()
