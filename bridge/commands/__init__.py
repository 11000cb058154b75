"""Subcommands of the `mqbridge` command line that live outside `mqbridge.cli`: each module adds its
parser (`add_parser(subparsers)`) and holds its handler; `help` holds every subcommand's
description, example and exit codes."""
