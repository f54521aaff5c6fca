"""The sandbox remote: three independently owned services behind one HTTP server, with faults on tap.

It plays inventory, payments and shipping, each with an action, its compensation and a status
query, so that the whole system can be driven against something that behaves like a real remote:

* it honours `Idempotency-Key` like Stripe does: the first request with a key is processed and its
  answer stored (business failures included); a repeat with the same request gets the stored answer
  back with `Idempotent-Replayed: true` and causes no second effect; a repeat with a different
  request is refused with 422;
* it fails on demand: a 503 without processing, a late answer, or the effect committed and the
  answer lost (the connection closed with nothing written), by rate or by a per-path script;
* it keeps count of every effect per operation, so a duplicate effect anywhere is visible in
  `GET /stats`.

Its memory is its own SQLite file (WAL, busy timeout). Each request processes inside a
`BEGIN IMMEDIATE` transaction, so concurrent requests with one key are serialised: the first
processes, the others replay. Connections are opened per request because sqlite3 connections must
not be shared between the server's threads.

Routes (JSON in and out; every service POST needs an `Idempotency-Key` header):

    POST /inventory/reserve   POST /inventory/release   GET /inventory/reservations/{operation_id}
    POST /payments/charge     POST /payments/refund     GET /payments/{operation_id}
    POST /shipping/schedule   POST /shipping/cancel     GET /shipping/shipments/{operation_id}
    GET /health   GET /stats   GET /config   POST /config (merge)   POST /reset ({"config": true})

and the asynchronous variant of every service POST, `POST /async/<route>` (202 now, the result
POSTed to `X-SAS-Callback-URL` later), a queue consumer with `--broker`, and a cancel of any
operation, `POST /cancel/<route>` (a step's `cancel_path`): recorded by its `Idempotency-Key`, the
operation's ID, and answered 200 `{"cancelled": <id>, "known": <whether it was processed>}`;
`GET /stats` lists them (`cancels`: operation ID, path, attempt, in arrival order).
A synchronous call whose input names `hold_ms` is held that long at the remote; `GET /stats`
counts the calls in flight at once per path, per `input.account`, and per path and account
(`max_concurrent`, `max_concurrent_by_account`, `max_concurrent_by_route_account`).
A charge whose input names `declines: n` is declined while its account (`input.account`, else its
`sku`) has declined fewer than n charges: each a new operation (a resent one answers as stored),
so a retry under a new operation ID goes through at the (n+1)-th. A call whose input names
`drops: n` is done but its answer lost (as a dropped call's) at each of the first n deliveries of
its operation: a step certain to come due unanswered.

A compensation (release, refund, cancel) names the operation it undoes in `compensates`; if that
operation never happened at this service it answers `{"noop": true, ...}` and changes nothing.

Only the standard library is used, so the remote stays independent of the system it tests;
the queue consumer alone uses kombu, as a real consumer of those queues would.

One module per part, each importing only those before it:

* `core`: the configuration and faults, the routes, the requests and answers (no I/O);
* `store`: the SQLite memory;
* `state`: what every mode shares (store, live config, scripts, fault RNG, operations in progress);
* `async_`: the asynchronous modes' reports (a callback, a reply message) and their faults;
* `queue`: the message-queue consumer;
* `http`: the HTTP server (`SandboxRemote`), which hands `POST /async/...` to `async_`.
"""

from testbed.sandbox.core import BadRequest, ConfigError, SandboxConfig
from testbed.sandbox.http import SandboxRemote, serve_until_signalled
from testbed.sandbox.queue import QueueConsumer
from testbed.sandbox.state import SandboxState
from testbed.sandbox.store import SandboxStore

__all__ = [
    "BadRequest",
    "ConfigError",
    "QueueConsumer",
    "SandboxConfig",
    "SandboxRemote",
    "SandboxState",
    "SandboxStore",
    "serve_until_signalled",
]
