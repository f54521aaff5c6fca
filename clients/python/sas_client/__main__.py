"""`python -m sas_client`: the `sas` command."""

from sas_client.cli import run

run()
