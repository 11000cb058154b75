"""`mqbridge jars`: fetch the Java libraries a table format needs in Spark (`mqbridge.landing.jar_sets`)
into `[spark] jars_dir` (or `--dir`), where `run` hands them to its Spark driver."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mqbridge.commands.help import parser_help


def add_parser(sub: Any) -> None:
    """Add `jars` to the subparsers `sub`."""
    from mqbridge.landing.jar_sets import JAR_SETS, MAVEN_CENTRAL

    jars = sub.add_parser("jars", help="fetch the jars a table format needs in Spark (Delta Lake) into [spark] "
                                       "jars_dir", **parser_help("jars"))
    where = jars.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", "-c", help="configuration file (TOML): the jars go to its [spark] jars_dir")
    where.add_argument("--dir", help="the folder to fetch into instead (the jars of a set go to DIR/SET)")
    jars.add_argument("sets", nargs="*", metavar="SET",
                      help=f"which jar sets: {', '.join(sorted(JAR_SETS))} (default: delta)")
    jars.add_argument("--repository", default=MAVEN_CENTRAL,
                      help=f"the Maven repository or mirror to fetch from (default: {MAVEN_CENTRAL})")
    jars.set_defaults(handler=cmd_jars)


def cmd_jars(args: argparse.Namespace) -> int:
    from mqbridge.errors import ConfigError
    from mqbridge.landing.jar_sets import JAR_SETS, FetchError, fetch

    unknown = [name for name in args.sets if name not in JAR_SETS]
    if unknown:
        raise ConfigError(f"no jar set {', '.join(unknown)} (there are: {', '.join(sorted(JAR_SETS))})")

    if args.config:
        from mqbridge.config import load_config

        cfg = load_config(args.config, secrets=False)
        folder = cfg.resolve_path(cfg.spark.jars_dir)
    else:
        folder = Path(args.dir)
    for name in args.sets or ["delta"]:
        try:
            paths = fetch(name, folder, args.repository)
        except FetchError as exc:
            print(f"mqbridge jars: {exc}", file=sys.stderr)
            return 1
        print(f"{name}: {len(paths)} jars in {folder / name}")
        for path in paths:
            print(f"  {path.name}")
        if name == "delta":
            _build_log_store(folder / name)
    return 0


def _build_log_store(delta_dir: Path) -> None:
    """Build the bridge's Delta log stores beside the Delta jars (`mqbridge.landing.log_store`). Without a
    JDK only a note: the store of `s3a://` tables is needed only there, where its absence is a start-up
    error naming this command; without the one of local tables Delta's own store commits them, slower."""
    from mqbridge.landing.log_store import LogStoreBuildError, build

    try:
        print(f"  {build(delta_dir).name} (the log stores of Delta tables on s3a:// and local disks, compiled here)")
    except LogStoreBuildError as exc:
        print(f"  not built: the log stores of Delta tables on s3a:// and local disks ({exc}); needed for Delta "
              "tables on s3a://, and faster commits on local disks")
