"""`manage.py sandbox_remote`: run the sandbox remote (testbed/sandbox/) until SIGTERM or SIGINT.

Prints `sandbox remote listening on http://HOST:PORT` once requests are being served; `--port 0`
takes a free port and the line names it.
"""

from __future__ import annotations

from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from testbed.sandbox import ConfigError, QueueConsumer, SandboxConfig, SandboxRemote, serve_until_signalled


def default_db_path(port: int) -> Path:
    var_dir = Path(getattr(settings, "VAR_DIR", settings.BASE_DIR / "var"))
    return var_dir / f"sandbox-{port}.sqlite3"


class Command(BaseCommand):
    help = "Run the sandbox remote: inventory, payments and shipping with idempotency keys and faults."
    # The sandbox is a separate service: it uses neither the project's database nor its models.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8100, help="0 = any free port")
        parser.add_argument("--db", type=Path, help="SQLite file (default: var/sandbox-<port>.sqlite3)")
        parser.add_argument("--error-rate", type=float, default=0.0, help="share of POSTs answered 503")
        parser.add_argument(
            "--decline-over", type=float, default=None, help="payments decline amounts above this"
        )
        parser.add_argument("--latency-ms", type=int, default=0, help="delay before processing")
        parser.add_argument(
            "--latency-rate", type=float, default=1.0, help="share of POSTs delayed by --latency-ms"
        )
        parser.add_argument(
            "--drop-rate", type=float, default=0.0, help="share of POSTs processed but never answered"
        )
        parser.add_argument(
            "--drop-hold-ms", type=int, default=0, help="how long a dropped request holds its connection"
        )
        parser.add_argument(
            "--broker",
            default="",
            help="also consume the services' request queues on this broker (redis://host:port/db)",
        )
        parser.add_argument(
            "--async-delay-ms",
            type=int,
            default=0,
            help="how long asynchronous work (POST /async/..., queued requests) takes before its result",
        )
        parser.add_argument("--seed", type=int, default=0, help="seed of the fault RNG")
        parser.add_argument("--reset", action="store_true", help="wipe the store at start")
        parser.add_argument(
            "--no-idempotency",
            action="store_true",
            help="process every request anew, ignoring stored keys (makes duplicates visible)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            config = SandboxConfig().merged(
                {
                    "error_rate": options["error_rate"],
                    "decline_over": options["decline_over"],
                    "latency_ms": options["latency_ms"],
                    "latency_rate": options["latency_rate"],
                    "drop_rate": options["drop_rate"],
                    "drop_hold_ms": options["drop_hold_ms"],
                    "honor_keys": not options["no_idempotency"],
                    "async_delay_ms": options["async_delay_ms"],
                }
            )
        except ConfigError as exc:
            raise CommandError(str(exc)) from exc
        db_path: Path = options["db"] or default_db_path(options["port"])
        try:
            remote = SandboxRemote(
                db_path,
                host=options["host"],
                port=options["port"],
                config=config,
                seed=options["seed"],
                reset=options["reset"],
                access_log=options["verbosity"] >= 2,
            )
        except OSError as exc:
            raise CommandError(f"cannot start the sandbox remote: {exc}") from exc

        consumer = None
        if options["broker"]:
            consumer = QueueConsumer(remote, options["broker"])

        def announce(url: str) -> None:
            if consumer is not None:
                consumer.start()
                if not consumer.ready.wait(30):
                    raise CommandError(f"cannot consume from {options['broker']}")
                self.stdout.write(f"sandbox remote consuming its queues on {options['broker']}")
            self.stdout.write(f"sandbox remote listening on {url}")
            # Whoever waits for this line may be reading a pipe, where output is block-buffered.
            self.stdout.flush()

        try:
            serve_until_signalled(remote, announce)
        finally:
            if consumer is not None:
                consumer.stop()
