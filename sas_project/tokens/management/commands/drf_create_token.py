"""`manage.py drf_create_token <username> [-r]`: DRF's command, for scripts, on our tokens.

Prints `Generated token <key> for user <username>` as DRF's does. Keys are stored only as
digests, so every call makes a new token (named "drf_create_token", with the standard lifetime);
`-r` revokes the user's earlier tokens of that name first.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from sas_project.tokens.services import token_create, token_revoke_named

NAME = "drf_create_token"


class Command(BaseCommand):
    help = "Create an API token for a user (expiring after SAS_TOKEN_LIFETIME_DAYS)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", type=str)
        parser.add_argument(
            "-r",
            "--reset",
            action="store_true",
            help="Revoke the user's earlier tokens made by this command.",
        )
        parser.add_argument("--name", default=NAME, help="The token's name (what it is for).")

    def handle(self, *args: Any, **options: Any) -> None:
        username = options["username"]
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"Cannot create the Token: user {username} does not exist")
        if options["reset"]:
            token_revoke_named(user=user, name=options["name"])
        token, key = token_create(user=user, name=options["name"])
        self.stdout.write(f"Generated token {key} for user {username}")
        expiry = f"expires {token.expires_at:%Y-%m-%d %H:%M} UTC" if token.expires_at else "never expires"
        self.stderr.write(f"token {token.prefix}… {expiry}")
