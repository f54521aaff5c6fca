from django.apps import AppConfig


class SupervisorConfig(AppConfig):
    name = "supervisor"
    verbose_name = "Supervisor"

    def ready(self) -> None:
        from scheduler.outbox import register_event_hook
        from supervisor.alerts import on_events

        # Alerts on events are written into the outbox in the transaction of their event.
        register_event_hook(on_events)
