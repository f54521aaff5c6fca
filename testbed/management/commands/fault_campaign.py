"""`manage.py fault_campaign`: prove under faults that no job is lost and no effect doubled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from testbed.campaign import CampaignConfig, run_campaign, table
from testbed.processes import allow_loopback_remotes


class Command(BaseCommand):
    help = (
        "Run jobs through real clusters and the sandbox remote while injecting faults; print the "
        "invariant figures (and write them as JSON); exit 1 when an invariant breaks."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        d = CampaignConfig()
        parser.add_argument("--jobs", type=int, default=d.jobs)
        parser.add_argument("--duration", type=float, default=d.duration, help="Seconds of faults.")
        parser.add_argument("--drain", type=float, default=d.drain, help="Seconds allowed to settle.")
        parser.add_argument("--clusters", type=int, default=d.clusters)
        parser.add_argument("--workers", type=int, default=d.workers, help="Workers per cluster.")
        parser.add_argument("--seed", type=int, default=d.seed)
        parser.add_argument("--error-rate", type=float, default=d.error_rate, help="Remote 5xx rate.")
        parser.add_argument(
            "--decline-rate", type=float, default=d.decline_rate, help="Jobs whose charge is declined."
        )
        parser.add_argument(
            "--latency-rate", type=float, default=d.latency_rate, help="Calls answered after their deadline."
        )
        parser.add_argument(
            "--drop-rate", type=float, default=d.drop_rate, help="Commit, then drop the answer."
        )
        parser.add_argument(
            "--kill-every", type=float, default=d.kill_every, help="SIGKILL a cluster every N s."
        )
        parser.add_argument(
            "--db-drop-every",
            type=float,
            default=d.db_drop_every,
            help="Terminate a cluster's database connection every N s.",
        )
        parser.add_argument(
            "--operator-every",
            type=float,
            default=d.operator_every,
            help="Two concurrent operator retries of one step every N s.",
        )
        parser.add_argument(
            "--commit-error-rate",
            type=float,
            default=d.commit_error_rate,
            help="Writes that commit and then report an error.",
        )
        parser.add_argument(
            "--pg-restart",
            action="store_true",
            help="Restart PostgreSQL (immediate mode) every 5-40 s; needs SAS_PG_DATADIR.",
        )
        parser.add_argument(
            "--timeout", type=float, default=d.timeout_seconds, help="Attempt timeout, seconds."
        )
        parser.add_argument(
            "--no-async-agents",
            action="store_true",
            help="Leave out the asynchronous agents (HTTP 202 + callback, a Redis queue) and their faults.",
        )
        parser.add_argument(
            "--reply-fault-rate",
            type=float,
            default=d.reply_fault_rate,
            help="Share of asynchronous results lost, repeated, late, and followed by an unknown one (each).",
        )
        parser.add_argument(
            "--broker-restart-every",
            type=float,
            default=d.broker_restart_every,
            help="Seconds between broker restarts.",
        )
        parser.add_argument(
            "--pgbouncer",
            action="store_true",
            help="Clusters and web processes reach the database through PgBouncer (transaction pooling).",
        )
        parser.add_argument(
            "--webs",
            type=int,
            default=d.webs,
            help="Web processes the jobs are submitted through, in turn (0: in-process).",
        )
        parser.add_argument(
            "--gunicorn",
            action="store_true",
            help="The web processes run under gunicorn with the production configuration.",
        )
        parser.add_argument("--json", type=Path, default=None, help="Write the report here.")
        parser.add_argument(
            "--scratch",
            action="store_true",
            help="Run even though the database holds jobs the campaign did not create.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        allow_loopback_remotes()
        cfg = CampaignConfig(
            jobs=options["jobs"],
            duration=options["duration"],
            drain=options["drain"],
            clusters=options["clusters"],
            workers=options["workers"],
            seed=options["seed"],
            error_rate=options["error_rate"],
            decline_rate=options["decline_rate"],
            latency_rate=options["latency_rate"],
            drop_rate=options["drop_rate"],
            kill_every=options["kill_every"],
            db_drop_every=options["db_drop_every"],
            operator_every=options["operator_every"],
            commit_error_rate=options["commit_error_rate"],
            pg_restart=options["pg_restart"],
            timeout_seconds=options["timeout"],
            scratch=options["scratch"],
            async_agents=not options["no_async_agents"],
            reply_fault_rate=options["reply_fault_rate"],
            broker_restart_every=options["broker_restart_every"],
            pgbouncer=options["pgbouncer"],
            webs=options["webs"],
            gunicorn=options["gunicorn"],
        )
        try:
            report = run_campaign(cfg, log=lambda line: self.stderr.write(line))
        except RuntimeError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(table(report))
        if options["json"]:
            options["json"].write_text(json.dumps(report, indent=2, default=str))
        if not report["ok"]:
            raise CommandError("an invariant broke: " + json.dumps(report["violations"]))
