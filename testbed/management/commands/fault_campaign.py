"""`manage.py fault_campaign`: prove under faults that no job is lost, no effect doubled, no
signal, approval or timer taken twice, no item called under two operation IDs and no child job
started twice."""

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
            "--supervisor-interval",
            type=float,
            default=d.supervisor_interval,
            help="The clusters' supervisor interval, seconds (the lease is three): the remediation "
            "goal is two.",
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
        parser.add_argument(
            "--wait-share",
            type=float,
            default=d.wait_share,
            help="Share of jobs whose workflow has a timer, a signal and an approval (0: none).",
        )
        parser.add_argument(
            "--signal-duplicate-rate",
            type=float,
            default=d.signal_duplicate_rate,
            help="Wait jobs whose signal is sent three times at once under one Idempotency-Key.",
        )
        parser.add_argument(
            "--signal-early-rate",
            type=float,
            default=d.signal_early_rate,
            help="Wait jobs signalled before their signal step waits.",
        )
        parser.add_argument(
            "--signal-late-rate",
            type=float,
            default=d.signal_late_rate,
            help="Wait jobs whose signal comes only after the step timed out.",
        )
        parser.add_argument(
            "--signal-extra-rate",
            type=float,
            default=d.signal_extra_rate,
            help="Wait jobs sent a second signal of the same name under another key.",
        )
        parser.add_argument(
            "--settled-signal-rate",
            type=float,
            default=d.settled_signal_rate,
            help="Wait jobs signalled again once they ended.",
        )
        parser.add_argument(
            "--approval-race-rate",
            type=float,
            default=d.approval_race_rate,
            help="Wait jobs whose approval is clicked twice at once (approve twice, or approve and reject).",
        )
        parser.add_argument(
            "--blackout-seconds",
            type=float,
            default=d.blackout_seconds,
            help="Seconds every cluster is down at once, halfway through the faults (0: never).",
        )
        parser.add_argument(
            "--language-share",
            type=float,
            default=d.language_share,
            help="Share of jobs whose workflow has a condition, a fan-out over items and a "
            "sub-workflow (0: none).",
        )
        parser.add_argument(
            "--hostile",
            action="store_true",
            help="Hostile answers, callback receivers and poison on the reply queue "
            "(testbed.campaign_hostile); contract and expression bombs unless --no-bombs.",
        )
        parser.add_argument(
            "--hostile-rate",
            type=float,
            default=d.hostile_rate,
            help="Share of the remote's answers that are hostile, the work done first.",
        )
        parser.add_argument(
            "--poison-every",
            type=float,
            default=d.poison_every,
            help="Seconds between two poison messages on the reply queue.",
        )
        parser.add_argument(
            "--poison",
            action="store_true",
            help="Poison beside the healthy jobs after a first phase without it: impossible times, NaN, "
            "unpaired surrogates, compression bombs, deep strings, black-holed receivers, a supervisor "
            "whose remediation fails (testbed.campaign_poison).",
        )
        parser.add_argument("--poison-jobs", type=int, default=d.poison_jobs, help="Poison jobs.")
        parser.add_argument(
            "--blackholes",
            type=int,
            default=d.blackholes,
            help="Jobs calling back to a receiver that never answers, one loopback host each.",
        )
        parser.add_argument(
            "--stuck-window",
            type=float,
            default=d.stuck_window,
            help="Seconds the supervisor whose remediation fails may hold out (0: none).",
        )
        parser.add_argument(
            "--no-bombs",
            action="store_true",
            help="With --hostile, leave out the contract and expression bombs (testbed.campaign_bombs).",
        )
        parser.add_argument(
            "--bomb-rate",
            type=float,
            default=d.bomb_rate,
            help="Bomb requests a second over the REST API with --hostile (0: the refused definitions "
            "only, no flood).",
        )
        parser.add_argument(
            "--keys",
            type=int,
            default=d.keys,
            help="Accounts the keyed order's jobs spread over, two at once each (0: no keyed jobs).",
        )
        parser.add_argument(
            "--no-flow",
            action="store_true",
            help="Leave out the flow control jobs (a step's concurrency and rate, debounce, throttle, "
            "cancels sent to the remote: testbed.campaign_flow).",
        )
        parser.add_argument(
            "--no-events",
            action="store_true",
            help="Leave out the events and correlation jobs (inbound events duplicated and reordered, "
            "signals by business key early and late, signal-with-start racing: testbed.campaign_events).",
        )
        parser.add_argument(
            "--no-loops",
            action="store_true",
            help="Leave out the language II jobs (poll-until loops, approvals whose wait escalates, "
            "children retried: testbed.campaign_loops).",
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
            supervisor_interval=options["supervisor_interval"],
            scratch=options["scratch"],
            async_agents=not options["no_async_agents"],
            reply_fault_rate=options["reply_fault_rate"],
            broker_restart_every=options["broker_restart_every"],
            pgbouncer=options["pgbouncer"],
            webs=options["webs"],
            gunicorn=options["gunicorn"],
            wait_share=options["wait_share"],
            signal_duplicate_rate=options["signal_duplicate_rate"],
            signal_early_rate=options["signal_early_rate"],
            signal_late_rate=options["signal_late_rate"],
            signal_extra_rate=options["signal_extra_rate"],
            settled_signal_rate=options["settled_signal_rate"],
            approval_race_rate=options["approval_race_rate"],
            blackout_seconds=options["blackout_seconds"],
            language_share=options["language_share"],
            hostile=options["hostile"],
            hostile_rate=options["hostile_rate"],
            poison_every=options["poison_every"],
            poison=options["poison"],
            poison_jobs=options["poison_jobs"],
            blackholes=options["blackholes"],
            stuck_window=options["stuck_window"],
            bombs=not options["no_bombs"],
            bomb_rate=options["bomb_rate"],
            keys=options["keys"],
            flow=not options["no_flow"],
            loops=not options["no_loops"],
            events=not options["no_events"],
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
