"""Run the webhook receiver (testbed.receiver) on a port."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from testbed.receiver import Receiver, make_server


class Command(BaseCommand):
    help = "Receive completion callbacks and alert webhooks; GET /received lists them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8766)
        parser.add_argument(
            "--fail-first", type=int, default=0, help="Answer 503 to the first N tries of each message."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        server = make_server(options["port"], Receiver(fail_first=options["fail_first"]))
        self.stdout.write(f"listening on http://127.0.0.1:{options['port']}", ending="\n")
        self.stdout.flush()
        try:
            server.serve_forever()
        finally:
            server.server_close()
