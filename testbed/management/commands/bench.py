"""`manage.py bench`: the service against bare django-q2, what users meet, in one run (PostgreSQL)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from testbed import bench
from testbed.bench import fanout, keyed, peerbench, scale, scaleout, waits
from testbed.bench.definitions import OWN_WORKFLOWS
from testbed.definitions import ForeignJobs, refuse_foreign_jobs
from testbed.processes import allow_loopback_remotes


class Command(BaseCommand):
    help = "Benchmark the service against bare django-q2 on this database (see docs/performance.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--jobs", type=int, default=300, help="Jobs per throughput run.")
        parser.add_argument("--steps", type=int, default=3, help="Sequential steps per job.")
        parser.add_argument("--workers", type=int, default=4, help="django-q2 workers.")
        parser.add_argument(
            "--rounds",
            type=int,
            default=None,
            help="Throughput rounds (bare, then service); default 2, 1 with --peers-only.",
        )
        parser.add_argument(
            "--sustained",
            type=float,
            default=200,
            help="Seconds of the sustained backlog (0: skip); longer than CONN_MAX_AGE and the lease.",
        )
        parser.add_argument(
            "--backlog", type=int, default=200, help="Live jobs kept during the sustained run."
        )
        parser.add_argument(
            "--history", type=int, default=1_000_000, help="Settled steps for the large scan (0: skip)."
        )
        parser.add_argument(
            "--small-history", type=int, default=10_000, help="Settled steps for the small scan."
        )
        parser.add_argument("--overdue", type=int, default=1000, help="Overdue steps per scan.")
        parser.add_argument(
            "--waiting",
            type=int,
            default=10_000,
            help="Waiting jobs (timers not due) beside the overdue steps of a scan (0: skip).",
        )
        parser.add_argument("--due", type=int, default=1000, help="Of those, timers made due for one scan.")
        parser.add_argument(
            "--waits-only",
            action="store_true",
            help="Only the waiting-steps part (--waiting, --due, --overdue).",
        )
        parser.add_argument(
            "--clusters",
            default="",
            help="Scale-out only: the HTTP workload with each of these numbers of clusters (e.g. 1,2,3).",
        )
        parser.add_argument(
            "--pgbouncer",
            action="store_true",
            help="Scale-out: clusters and the web process reach the database through PgBouncer.",
        )
        parser.add_argument(
            "--fan-out",
            type=int,
            default=0,
            help="Only the fan-out run: one job over this many items beside as many one-step jobs "
            "(through the API, HTTP calls to the sandbox), --rounds alternated.",
        )
        parser.add_argument(
            "--keyed",
            type=int,
            default=0,
            help="Only the concurrency-key run: a backlog of this many jobs of one key before another "
            "key's (fairness), then --jobs jobs over --keys keys with and without a key, --rounds "
            "alternated (through the API, HTTP calls to the fast remote).",
        )
        parser.add_argument("--keys", type=int, default=50, help="Keyed run: keys the jobs spread over.")
        parser.add_argument(
            "--gunicorn",
            action="store_true",
            help="Fan-out and keyed runs: the API under gunicorn (default: runserver).",
        )
        parser.add_argument(
            "--remote",
            choices=["fast", "sandbox"],
            default="fast",
            help="The remote of the HTTP steps: `fast` answers from memory with TCP_NODELAY and shows "
            "its CPU per call (testbed.fastremote); `sandbox` keeps its effects in SQLite (slower than "
            "bare django-q2: it caps the baseline).",
        )
        parser.add_argument(
            "--web",
            default="gunicorn,runserver",
            help="The web servers the API is measured under, in order: gunicorn (production "
            "configuration), runserver (make run), or both separated by a comma.",
        )
        parser.add_argument(
            "--peers",
            nargs="?",
            const=",".join(peerbench.PEERS),
            default="",
            help="Also run the same chains on these peers, each in a virtualenv of its own under "
            "var/peers/ (default when bare: temporal,procrastinate,dbos); see docs/performance.md.",
        )
        parser.add_argument(
            "--peers-work",
            default=",".join(peerbench.WORKS),
            help="The peers' work per step: http (the bare task's POST to the remote), noop, or both.",
        )
        parser.add_argument(
            "--peers-only",
            action="store_true",
            help="With --peers: the throughput rounds (one unless --rounds) for comparison, then the "
            "peers; no sustained run, scans or waiting jobs.",
        )
        parser.add_argument("--json", type=Path, default=None, help="Also write the results here.")
        parser.add_argument(
            "--scale",
            action="store_true",
            help="Only the history-at-scale run: scan and pages at --small-history and --history steps, "
            "history_prune of --prune-rows rows under a workload, table sizes.",
        )
        parser.add_argument(
            "--prune-rows", type=int, default=1_000_000, help="Rows of prunable history (--scale)."
        )
        parser.add_argument(
            "--scratch",
            action="store_true",
            help="Run even though the database holds jobs the benchmark did not create.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        peers: tuple[str, ...] = ()
        peers_work: tuple[str, ...] = peerbench.WORKS
        if options["peers"]:
            try:
                peers = peerbench.parse_list(options["peers"], peerbench.PEERS, "--peers")
                peers_work = peerbench.parse_list(options["peers_work"], peerbench.WORKS, "--peers-work")
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
        if options["peers_only"]:
            if not peers:
                raise CommandError("--peers-only runs the peers: give --peers too")
            options.update(sustained=0, history=0, waiting=0)
        if peers and any(options[k] for k in ("scale", "fan_out", "waits_only", "clusters")):
            raise CommandError(
                "--peers runs beside the main run, not --scale, --fan-out, --waits-only or --clusters"
            )
        if options["rounds"] is None:
            options["rounds"] = 1 if options["peers_only"] else 2
        allow_loopback_remotes()
        # The in-process workloads submit thousands of jobs: their log lines would bury the table.
        logging.getLogger("scheduler.jobs").setLevel(logging.WARNING)

        def log(line: str) -> None:
            self.stderr.write(line)

        if options["scale"]:
            refuse_foreign_jobs("bench", OWN_WORKFLOWS, scratch=options["scratch"])
            self.one_run(
                options,
                lambda: scale.run(
                    small=options["small_history"],
                    large=options["history"],
                    prune_rows=options["prune_rows"],
                    overdue=options["overdue"],
                    log=log,
                ),
                scale.table,
            )
            return
        if options["fan_out"]:
            self.one_run(
                options,
                lambda: fanout.run(
                    items=options["fan_out"],
                    rounds=options["rounds"],
                    workers=options["workers"],
                    gunicorn=options["gunicorn"],
                    log=log,
                    scratch=options["scratch"],
                ),
                fanout.table,
            )
            return
        if options["keyed"]:
            self.one_run(
                options,
                lambda: keyed.run(
                    jobs=options["jobs"],
                    backlog=options["keyed"],
                    keys=options["keys"],
                    steps=options["steps"],
                    rounds=options["rounds"],
                    workers=options["workers"],
                    gunicorn=options["gunicorn"],
                    log=log,
                    scratch=options["scratch"],
                ),
                keyed.table,
            )
            return
        if options["waits_only"]:
            self.one_run(
                options,
                lambda: bench.run_waits(
                    waiting=options["waiting"],
                    due=options["due"],
                    overdue=options["overdue"],
                    scratch=options["scratch"],
                ),
                lambda results: "\n".join(
                    ["| measure | value |", "| --- | --- |", *waits.table_rows(results["waits"])]
                ),
            )
            return
        if options["clusters"]:
            self.scaleout(options)
            return
        if options["pgbouncer"]:
            raise CommandError("--pgbouncer applies to the scale-out run: give --clusters too (e.g. 1,2,3)")
        webs = tuple(w.strip() for w in options["web"].split(",") if w.strip())
        if not webs or set(webs) - {"gunicorn", "runserver"}:
            raise CommandError("--web takes gunicorn, runserver or both, separated by a comma")
        try:
            results = bench.run(
                jobs=options["jobs"],
                steps=options["steps"],
                workers=options["workers"],
                rounds=options["rounds"],
                sustained=options["sustained"],
                backlog=options["backlog"],
                history_steps=options["history"],
                small_history=options["small_history"],
                overdue=options["overdue"],
                waiting=options["waiting"],
                due=options["due"],
                log=log,
                scratch=options["scratch"],
                remote=options["remote"],
                webs=webs,
                peers=peers,
                peers_work=peers_work,
            )
        except (RuntimeError, ForeignJobs) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(bench.table(results))
        if options["json"]:
            options["json"].write_text(json.dumps(results, indent=2, default=str))
            self.stdout.write(f"\nwritten to {options['json']}")

    def one_run(
        self,
        options: dict[str, Any],
        run: Callable[[], dict[str, Any]],
        table: Callable[[dict[str, Any]], str],
    ) -> None:
        """One of the runs that stand alone (--scale, --fan-out, --keyed, --waits-only): its
        figures as a table, and as JSON with --json."""
        try:
            results = run()
        except (RuntimeError, ForeignJobs) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(table(results))
        if options["json"]:
            options["json"].write_text(json.dumps(results, indent=2, default=str))

    def scaleout(self, options: dict[str, Any]) -> None:
        try:
            counts = [int(n) for n in options["clusters"].split(",") if n.strip()]
        except ValueError as exc:
            raise CommandError("--clusters takes numbers separated by commas, e.g. 1,2,3") from exc
        try:
            results = scaleout.run_scaleout(
                counts=counts,
                jobs=options["jobs"],
                steps=options["steps"],
                workers=options["workers"],
                sustained=options["sustained"],
                backlog=options["backlog"],
                pgbouncer=options["pgbouncer"],
                log=lambda line: self.stderr.write(line),
                scratch=options["scratch"],
            )
        except (RuntimeError, ForeignJobs) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(scaleout.table(results))
        if options["json"]:
            options["json"].write_text(json.dumps(results, indent=2, default=str))
            self.stdout.write(f"\nwritten to {options['json']}")
