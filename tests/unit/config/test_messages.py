"""Problems worded for the person editing the TOML (`config.messages`), the formats `run` would only
refuse at connect time, and loading without secrets (`load_config(secrets=False)`)."""

from __future__ import annotations

import pytest

from mqbridge.config import parse_config
from mqbridge.config.loader import UNRESOLVED, check_text
from mqbridge.errors import ConfigError
from tests.unit.config.texts import MINIMAL, error

MQ = """
[types.orders]
[sources.qm]
kind = "mq"
queue_manager = "QM1"
conn_name = "{conn_name}"
[[listeners]]
source = "qm"
queue = "ORDERS"
message_type = "orders"
"""


@pytest.mark.parametrize("text, expected", [
    # A typo gets the key it is closest to, from the keys its own table allows.
    ("[collector]\nmemroy = 1\n" + MINIMAL, "collector.memroy: unknown key — did you mean memory?"),
    (MINIMAL.replace("[types.orders]", "[types.orders]\nshema = 'x'"),
     "types.orders.shema: unknown key — did you mean schema?"),
    (MINIMAL.replace('kind = "stomp"', 'kind = "stomp"\nhots = "h"'),
     "sources.amq.hots: unknown key — did you mean host?"),
    (MINIMAL + "batchsize = 5\n", "listeners[0].batchsize: unknown key — did you mean batch?"),
    (MINIMAL.replace('kind = "stomp"', 'kind = "stomp"\nconn_name = "h(1414)"'),
     "sources.amq.conn_name: unknown key — a key of kind = 'mq' sources"),
    # Negative and zero sizes: neither is said to be allowed where the key refuses it.
    (MINIMAL.replace('"5MB"', "-5"), "types.orders.bulk_size: -5 is negative (use e.g. 512KB, 5MB, 1GB)"),
    (MINIMAL.replace('"5MB"', "0"), "types.orders.bulk_size: must be more than 0"),
])
def test_problems_are_worded_for_the_file(text: str, expected: str) -> None:
    message = error(text)
    assert message == f"demo.toml: {expected}"
    assert "Input should" not in message and "0 or more" not in message


def test_a_template_error_shows_what_was_written_not_its_rendering() -> None:
    message = error(MINIMAL.replace('bulk_size = "5MB"', 'table = "{source}/../{type}"'))
    assert "'{source}/../{type}' is not a safe table directory" in message
    assert "s/../t" not in message


@pytest.mark.parametrize("conn_name, expected", [
    ("mqhost:1414", "'mqhost:1414' is host:port; IBM MQ writes the port in brackets — write mqhost(1414)"),
    ("a(1414),b:1415", "'b:1415' is host:port; IBM MQ writes the port in brackets — write b(1415)"),
])
def test_conn_name_in_host_colon_port_form_says_what_to_write(conn_name: str, expected: str) -> None:
    assert error(MQ.format(conn_name=conn_name)) == f"demo.toml: sources.qm.conn_name: {expected}"


def test_conn_name_with_an_ipv6_address_is_not_host_colon_port() -> None:
    parse_config(MQ.format(conn_name="2001:db8::1(1414)"), "demo.toml")


@pytest.mark.parametrize("remote, ok", [
    ("sc://spark host:15002", False), ("sc://:15002", False), ("sc://h:port", False),
    ("sc://spark-host:15002", True), ("sc://h", True), ("sc://[::1]:15002/;use_ssl=true;token=abc", True),
])
def test_a_malformed_spark_connect_url_is_refused_at_load(remote: str, ok: bool) -> None:
    text = f"[spark]\nremote = '{remote}'\n" + MINIMAL
    if ok:
        parse_config(text, "demo.toml")
    else:
        assert "is not a Spark Connect URL: write sc://HOST:PORT" in error(text)


@pytest.mark.parametrize("host, expected", [
    ("broker:61613", "'broker:61613' has a port; write host = 'broker' and port = 61613"),
    ("tcp://broker", "'tcp://broker' is not a host name or address"),
])
def test_a_stomp_host_with_a_port_or_scheme_is_refused(host: str, expected: str) -> None:
    assert expected in error(MINIMAL.replace('kind = "stomp"', f'kind = "stomp"\nhost = "{host}"'))


def test_without_secrets_an_unset_reference_is_listed_not_refused() -> None:
    # Given a password and a token from an environment this shell does not have
    text = MINIMAL.replace('kind = "stomp"', 'kind = "stomp"\npassword = "${ENV:AMQ_PW}"')
    text = "[monitoring]\ntoken = '${FILE:/nonexistent/token}'\n" + text
    with pytest.raises(ConfigError, match="environment variable AMQ_PW is not set"):
        parse_config(text, "demo.toml", env={})
    # When a command that needs no secret loads it
    config = parse_config(text, "demo.toml", env={}, secrets=False)
    # Then it loads, with placeholders, and says which references it left
    assert config.sources["amq"].password.get_secret_value() == UNRESOLVED  # type: ignore[union-attr]
    assert set(config.unresolved) == {"sources.amq.password", "monitoring.token"}
    config.require_resolved("ledger")  # not under ledger: nothing to say
    with pytest.raises(ConfigError, match="demo.toml: sources.amq.password: environment variable AMQ_PW is not set "
                                          r"\(this command needs it\)"):
        config.require_resolved("sources")


def test_a_whole_ledger_url_left_unresolved_still_loads() -> None:
    text = "[ledger]\nurl = '${ENV:LEDGER_URL}'\n" + MINIMAL
    config = parse_config(text, "<string>", env={}, secrets=False)
    assert list(config.unresolved) == ["ledger.url"]


def test_check_text_collects_every_problem() -> None:
    text = "[collector]\nworkers = 0\nmemroy = 1\n" + MINIMAL + "threads = 99\n"
    checked = check_text(text, "demo.toml", env={})
    assert checked.config is None
    assert [msg for _, msg in checked.problems] == [
        "must be 1 or more", "unknown key — did you mean memory?", "must be 64 or less"]
