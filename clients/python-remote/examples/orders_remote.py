"""The order workflow's remote (reserve, charge, ship and their undos) on sas_remote, with its
operations remembered in SQLite: `python orders_remote.py [port] [database file]`."""

import sys
import uuid

from sas_remote import Refused, Request, SqlStore, make_wsgi_app, serve


def handle(request: Request) -> dict[str, str]:
    action = request.path.strip("/").replace("/", ".")  # inventory.reserve, payments.charge, ...
    if action == "payments.charge" and request.input.get("amount", 0) > 1000:
        raise Refused("the amount is over the card's limit", status=402)
    print(f"effect {action} {request.operation_id}", flush=True)  # the side effect, once per operation
    return {"action": action, "reference": uuid.uuid4().hex}


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8200
    db = sys.argv[2] if len(sys.argv) > 2 else "orders.sqlite3"
    serve(make_wsgi_app(handle, store=SqlStore.sqlite(db)), port=port)
