"""How the commands that talk to a running bridge (`mqbridge status`, `mqbridge listener`) find its
monitoring endpoint: `--url`, else the `[monitoring] listen` of `--config`, else the default
address; the TLS and token of `--config`, or `--cacert` and `--token-file` with a bare `--url`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mqbridge.config import load_config, parse_duration
from mqbridge.errors import ConfigError, StatusUnreachableError
from mqbridge.monitoring import DEFAULT_URL, EXIT_UNREACHABLE, Credentials, url_from_config


class EndpointError(Exception):
    """The endpoint cannot be reached as asked; `code` is the command's exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def duration(text: str) -> float:
    """An argparse type: a duration such as 5s, 500ms, 2m."""
    try:
        return parse_duration(text)
    except (ValueError, ConfigError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_endpoint_options(parser: Any, config_help: str = "configuration file whose [monitoring] to ask: its "
                                                                   "listen address, TLS and token") -> None:
    """--url, --config (`config_help`), --cacert, --token-file and --timeout."""
    parser.add_argument("--url", default=None, help="monitoring endpoint (default: from --config, else "
                                                    "http://127.0.0.1:9464)")
    parser.add_argument("--config", "-c", default=None, help=config_help)
    parser.add_argument("--cacert", type=Path, default=None, metavar="FILE",
                        help="without --config: CA certificate (PEM) the https endpoint's certificate is verified "
                             "against (default: the system's CAs)")
    parser.add_argument("--token-file", type=Path, default=None, metavar="FILE",
                        help="without --config: file holding the endpoint's token (a token is never given on the "
                             "command line, where ps shows it)")
    parser.add_argument("--timeout", type=duration, default=5.0, help="HTTP timeout (default 5s)")


def check_options(args: argparse.Namespace) -> None:
    """EndpointError (exit code 2) when --cacert or --token-file come with --config: two sources of
    one CA or token, which one was meant?"""
    if args.config and (args.cacert is not None or args.token_file is not None):
        raise EndpointError("--cacert and --token-file are for a --url without --config (a configuration's "
                            "[monitoring] gives its own CA and token)", 2)


def endpoint(args: argparse.Namespace) -> tuple[str, Credentials]:
    """(URL, credentials) of the endpoint the options name. EndpointError with exit code 2 for options
    that do not go together, 3 when the configuration gives no address to reach; ConfigError for
    a configuration or file that cannot be used."""
    check_options(args)
    url = args.url
    if args.config:
        config = load_config(args.config, secrets=False)  # the sources' and the ledger's are not needed
        config.require_resolved("monitoring")
        credentials = Credentials.from_config(config)  # the token and TLS, also for a --url given
        try:
            return url or url_from_config(config), credentials
        except StatusUnreachableError as exc:
            raise EndpointError(str(exc), EXIT_UNREACHABLE) from exc
    url = url or DEFAULT_URL
    if args.cacert is not None and not url.lower().startswith("https://"):
        raise EndpointError(f"--cacert is for an https:// endpoint, not {url}", 2)
    return url, Credentials.from_files(args.cacert, args.token_file)
