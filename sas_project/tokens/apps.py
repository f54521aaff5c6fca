from django.apps import AppConfig


class TokensConfig(AppConfig):
    name = "sas_project.tokens"
    label = "tokens"
    verbose_name = "API tokens"
    default_auto_field = "django.db.models.BigAutoField"
