from django.apps import AppConfig


class TestbedConfig(AppConfig):
    """Tools that exercise the service from outside: the sandbox remote, the fault campaign and
    the benchmark. No product module imports this app (import-linter holds the line)."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "testbed"
    verbose_name = "Testbed"
