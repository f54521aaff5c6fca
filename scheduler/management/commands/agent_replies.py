"""`manage.py agent_replies`: consume the replies of queue pools' remotes on its own (every
`qcluster` also runs this consumer unless SAS_REPLIES_IN_CLUSTER=0). Stops on SIGTERM or SIGINT."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand

from scheduler.replies import run_replies


class Command(BaseCommand):
    help = "Record the replies that the remotes of queue pools send on the reply queue."

    def handle(self, *args: Any, **options: Any) -> None:
        stopping = threading.Event()

        def ask_to_stop(signum: int, frame: object) -> None:
            stopping.set()

        signal.signal(signal.SIGTERM, ask_to_stop)
        signal.signal(signal.SIGINT, ask_to_stop)
        self.stdout.write("agent_replies: consuming replies")
        total = run_replies(stopping.is_set)
        self.stdout.write(f"agent_replies: stopped after {total} replies")
