from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"
    verbose_name = "Scheduler"

    def ready(self) -> None:
        from django.core import checks

        from agents.broker import register_compact_task
        from agents.health import register_outcome_reader
        from sas_project import dbcode
        from scheduler.outbox import CHILD_SETTLED_TASK, CHILD_START_TASK
        from scheduler.selectors import endpoint_recent_outcomes
        from scheduler.services.cancels import CANCEL_TASK
        from scheduler.services.dispatch import AGENT_TASK
        from scheduler.services.flow import on_key_freed
        from scheduler.transitions import key_freed

        # The agent task is enqueued as a compact row (a function path and two ids), which the
        # scheduler's SQL can write too; the broker turns it back into django-q2's task.
        register_compact_task(AGENT_TASK, "step-{0}-attempt-{1}")
        register_compact_task(CHILD_START_TASK, "step-{0}-child-start")
        register_compact_task(CHILD_SETTLED_TASK, "step-{0}-child-settled")
        register_compact_task(CANCEL_TASK, "cancel-{0}-try-{1}")
        # Endpoint health judges an endpoint by the calls made through it: the attempts are ours.
        register_outcome_reader(endpoint_recent_outcomes)
        # A job that settles starts what waits for its concurrency key.
        key_freed.connect(on_key_freed, dispatch_uid="scheduler.flow.on_key_freed")
        # The database's functions and triggers match their files (sas_project.dbcode).
        checks.register(dbcode.check, checks.Tags.database)
