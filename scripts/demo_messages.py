"""Put sample messages for the demo on the local broker: JSON orders (a few malformed, which
end on the backout queue) and binary/XML invoices."""

from __future__ import annotations

import argparse
import json
import random
import threading
import uuid

import stomp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--orders", type=int, default=3000)
    parser.add_argument("--invoices", type=int, default=2000)
    parser.add_argument("--malformed", type=int, default=5)
    parser.add_argument("--port", type=int, default=61613)
    args = parser.parse_args()

    conn = stomp.Connection12([("127.0.0.1", args.port)], auto_decode=False)
    receipt = threading.Event()

    class OnReceipt(stomp.ConnectionListener):
        def on_receipt(self, frame: object) -> None:
            receipt.set()

    conn.set_listener("r", OnReceipt())
    conn.connect(wait=True)
    rnd = random.Random(42)
    for i in range(args.orders):
        body = json.dumps({"order_id": f"O-{i:06d}", "customer": f"C-{rnd.randrange(500):04d}",
                           "amount": f"{rnd.uniform(1, 5000):.2f}", "currency": rnd.choice(["EUR", "USD", "GBP"])})
        conn.send("/queue/demo.orders", body.encode(), headers={"persistent": "true", "type": "order",
                                                                 "correlation-id": str(uuid.uuid4())})
    for i in range(args.malformed):
        conn.send("/queue/demo.orders", b"{not json " + str(i).encode(), headers={"persistent": "true"})
    for i in range(args.invoices):
        xml = f"<invoice no='{i}'><total>{rnd.uniform(10, 900):.2f}</total></invoice>".encode("utf-16")
        conn.send("/queue/demo.invoices", xml, headers={"persistent": "true", "encoding": "utf-16"})
    conn.send("/queue/demo.sync", b"", headers={"receipt": "done"})
    receipt.wait(60)
    conn.disconnect()
    print(f"put {args.orders + args.malformed} orders ({args.malformed} malformed) on /queue/demo.orders "
          f"and {args.invoices} invoices on /queue/demo.invoices")


if __name__ == "__main__":
    main()
