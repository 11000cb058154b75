"""The plaintext password rule: a password that travels without TLS is accepted to a loopback
address (it never leaves the machine; the bridge logs it once at start: `config.exposure`) and
refused to any other address unless the section says `allow_plaintext_password = true`.

Loopback means 127.0.0.0/8, ::1 (IPv4-mapped forms included) and the name `localhost`; no name is
resolved, so a host name that merely points at 127.0.0.1 counts as remote. A PostgreSQL ledger
over a Unix-domain socket (no host, or a host that is a directory) is local too.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote

#: libpq `sslmode` values that guarantee TLS; absent, disable, allow and prefer do not.
TLS_SSLMODES = frozenset({"require", "verify-ca", "verify-full"})
_HOST_PORT = re.compile(r"^(\[[^\]]*\]|[^:]*)(:\d*)?$")
_CONN_NAME_HOST = re.compile(r"^([^()]+?)(\(\d+\))?$")


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or name, IPv6 with or without brackets) is this machine's
    loopback: 127.0.0.0/8, ::1, or `localhost`. Names are not resolved."""
    host = host.strip().strip("[]").rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def conn_name_hosts(conn_name: str) -> list[str]:
    """The hosts of an IBM MQ CONNAME: "host(1414)" or a comma list of them."""
    hosts = []
    for part in conn_name.split(","):
        match = _CONN_NAME_HOST.match(part.strip())
        if match:
            hosts.append(match[1])
    return hosts


def all_loopback(hosts: Iterable[str]) -> bool:
    """Every one of `hosts` (at least one) is a loopback address."""
    listed = list(hosts)
    return bool(listed) and all(is_loopback(host) for host in listed)


def ledger_exposure(url: str) -> tuple[bool, bool, list[str]]:
    """What a PostgreSQL ledger URL says about its password's path: (has a password, TLS is
    required by `sslmode`, the hosts it may connect to over TCP). A host that is empty or a
    directory is a Unix-domain socket and is not listed."""
    rest = url.split("://", 1)[1] if "://" in url else url
    netloc, _, query = rest.partition("?")
    netloc = netloc.split("/", 1)[0]
    userinfo, _, hostlist = netloc.rpartition("@")
    params = dict(parse_qsl(query, keep_blank_values=True))
    password = (":" in userinfo and bool(userinfo.split(":", 1)[1])) or bool(params.get("password"))
    tls = params.get("sslmode", "").strip().lower() in TLS_SSLMODES
    hosts: list[str] = []
    # `host` and `hostaddr` parameters win over the URL's own hosts (libpq): every one is checked.
    for spec in (hostlist, params.get("host", ""), params.get("hostaddr", "")):
        for item in spec.split(","):
            match = _HOST_PORT.match(unquote(item.strip()))
            host = match[1] if match else item
            if host and not host.startswith("/"):
                hosts.append(host)
    return password, tls, hosts


def ledger_problem(url: str, allowed: bool) -> str | None:
    """Why a ledger URL may not be used as configured (a password without TLS to a host that is
    not loopback and `allow_plaintext_password` not set), or None."""
    password, tls, hosts = ledger_exposure(url)
    if not password or tls or allowed or all(is_loopback(host) for host in hosts):
        return None
    remote = ", ".join(sorted({host for host in hosts if not is_loopback(host)}))
    return (f"has a password but no TLS to {remote}: the password would travel in clear; add "
            "?sslmode=verify-full (or require / verify-ca) to the URL, or set [ledger] "
            "allow_plaintext_password = true to accept the risk")
