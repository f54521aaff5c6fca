"""The remote side of the Scheduler Agent Supervisor's HTTP agents.

    from sas_remote import Refused, SqlStore, make_wsgi_app, serve

    def handle(request):
        if request.input["amount"] > 1000:
            raise Refused("over the limit")
        return {"charged": request.input["amount"]}

    serve(make_wsgi_app(handle, store=SqlStore.sqlite("remote.sqlite3")), port=8200)

Modules: `messages` (what a handler gets, raises and returns), `core` (the rules, free of any
web framework), `store` (the store protocol, the
in-memory store), `sql` (DB-API), `redis_store` (Redis, the `redis` extra), `callbacks` (results
and heartbeats POSTed to the scheduler), `verify` (signed callbacks and alerts), `wsgi`, `asgi`,
`serve` (a standard-library server).
"""

from sas_remote.asgi import make_asgi_app
from sas_remote.callbacks import CallbackClient, Delivery
from sas_remote.core import Remote
from sas_remote.messages import (
    Accepted,
    AttemptGivenUp,
    Heartbeat,
    Refused,
    Request,
    Response,
    TryLater,
    later,
)
from sas_remote.serve import make_server, serve
from sas_remote.sql import SqlStore
from sas_remote.store import MemoryStore, Record, Store
from sas_remote.verify import VerificationError, verify
from sas_remote.wsgi import make_wsgi_app

__all__ = [
    "Accepted",
    "AttemptGivenUp",
    "CallbackClient",
    "Delivery",
    "Heartbeat",
    "MemoryStore",
    "Record",
    "Refused",
    "Remote",
    "Request",
    "Response",
    "SqlStore",
    "Store",
    "TryLater",
    "VerificationError",
    "later",
    "make_asgi_app",
    "make_server",
    "make_wsgi_app",
    "serve",
    "verify",
]
