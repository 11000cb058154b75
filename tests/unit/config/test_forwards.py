"""`[[forwards]]`: accepted as written, with defaults; refused with the key and the reason where
`mqbridge follow` could not send (a missing source, a bad destination, a loop back into a listener,
no landing ledger, a name twice)."""

from __future__ import annotations

import pytest

from tests.unit.config.texts import MINIMAL, error, parse

FORWARD = """
[[forwards]]
name = "{name}"
table = "orders"
source = "{source}"
to = [{to}]
"""


def forward(to: str = '"/queue/billing"', source: str = "amq", name: str = "billing", extra: str = "") -> str:
    return FORWARD.format(name=name, source=source, to=to) + extra


def test_a_forward_is_read_with_its_defaults() -> None:
    config = parse(MINIMAL + forward(extra='senders = ["/queue/orders"]\nwhere = "headers[\'r\'] = \'eu\'"'))
    [f] = config.forwards
    assert (f.name, f.table, f.source, f.to, f.senders) == ("billing", "orders", "amq", ["/queue/billing"],
                                                            ["/queue/orders"])
    assert (f.every, f.batch, f.start, f.backout_queue, f.backout_threshold) == (5.0, 100, "new", None, 3)
    assert parse(MINIMAL).forwards == []


@pytest.mark.parametrize(("text", "expected"), [
    (forward(source="nope"), "forwards[0].source: 'nope' is not a configured source"),
    (forward(to='"BILLING"'), "forwards[0].to[0]: a STOMP destination starts with"),
    (forward(to='"/temp-queue/x"'), "forwards[0].to[0]: '/temp-queue/x' is not allowed: a temporary or reply "
                                    "destination"),
    (forward(to='"/queue/orders"'), "forwards[0].to[0]: /queue/orders is read by a listener of this configuration"),
    (forward(to='"/queue/a", "/queue/a"'), "forwards[0].to: a destination is named twice"),
    (forward(to=""), "forwards[0].to"),
    (forward() + forward(to='"/queue/b"'), "forwards[1].name: 'billing' names two forwards"),
    (forward(name="bad name"), "a forward's name is 1 to 64 letters, digits"),
    (forward(extra='start = "oldest"'), "forwards[0].start"),
    (forward(extra='backout_queue = "/queue/billing"'), "forwards[0].backout_queue: is one of the forward's "
                                                         "destinations"),
    (forward(extra='backout_queue = "/queue/orders"'), "forwards[0].backout_queue: /queue/orders is read by a "
                                                        "listener"),
    (forward(extra="backout_threshold = 0"), "forwards[0].backout_threshold"),
    (MINIMAL.replace("[types.orders]", "[bridge]\nexactly_once = false\n[types.orders]") + forward(),
     "forwards[0]: a forward finds newly landed bulks in the landing ledger"),
])
def test_a_forward_follow_could_not_send_is_refused_naming_the_key(text: str, expected: str) -> None:
    body = text if text.startswith(MINIMAL[:20]) or "[bridge]" in text else MINIMAL + text
    assert expected in error(body)
