"""HTTP GET (and POST) for tests of the monitoring endpoint: a status never raises, and neither does a
server that is not (or no longer) listening, so a test can poll an endpoint while it comes up."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from typing import NamedTuple


class Response(NamedTuple):
    """What a GET returned; status 0 (and nothing else) when no server answered."""

    status: int
    content_type: str
    text: str


def fetch(url: str, *, timeout: float = 10.0, token: str | None = None,
          context: ssl.SSLContext | None = None, method: str = "GET") -> Response:
    """GET (or `method`) `url`: its status, Content-Type and body, whatever the status; `token` is
    sent as `Authorization: Bearer`, `context` verifies an https server."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {},
                                     method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return Response(response.status, response.headers.get("Content-Type", ""),
                            response.read().decode())
    except urllib.error.HTTPError as exc:
        return Response(exc.code, exc.headers.get("Content-Type", ""), exc.read().decode())
    except OSError:  # URLError is one: nothing listens there (yet, or any more)
        return Response(0, "", "")


def get(url: str, *, timeout: float = 10.0, token: str | None = None,
        context: ssl.SSLContext | None = None) -> tuple[int, str]:
    """GET `url`: its status and body (status 0: no server answered)."""
    status, _, text = fetch(url, timeout=timeout, token=token, context=context)
    return status, text
