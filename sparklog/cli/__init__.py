"""`python -m sparklog ...`: run a cluster and take quick looks at it from a shell.

Subcommands, after Kafka's tools:

- `serve` (kafka-server-start): a controller and N brokers until SIGINT/SIGTERM, either in
  this process (`--master none`, an `EmbeddedCluster`) or as Spark tasks of a SparkSession
  with that master (`sparklog.start`); prints `bootstrap.servers=host:port,...` once ready.
- `topics create|list|describe|alter|delete` (kafka-topics), `produce` (kafka-console-producer,
  lines from stdin), `consume [--group G]` (kafka-console-consumer), `groups list|describe
  [--members|--state]|reset-offsets|delete|delete-offsets` (kafka-consumer-groups), `configs
  describe|alter` (kafka-configs --entity-type topics|brokers|groups), `get-offsets`
  (kafka-get-offsets), `delete-records` (kafka-delete-records), `acls add|list|remove`
  (kafka-acls) and `users add-scram|describe|delete` (kafka-configs --entity-type users),
  `quotas describe|alter` (kafka-configs --entity-type users|clients|ips) and
  `reassign-partitions --execute|--verify|--cancel [--throttle]` (kafka-reassign-partitions),
  all through `sparklog.client`; `tables list|status` (the topics' remote tiers, their
  Delta tables, and how far behind the log they are; docs/tiered-storage.md).

One module per command group: `common` (settings, errors), `serve`, `topics`, `records`
(produce/consume), `groups`, `security` (acls, users), `quotas`, `reassign`, `configs`,
`offsets` (get-offsets, delete-records), `tables`. `--version` prints the installed version.

Settings use Kafka's names: `--config k=v` (cluster/broker settings for `serve`, topic configs
for `topics create`), `--property k=v` (client settings and console options for `produce` and
`consume`), `--command-config FILE` (a client properties file). `serve` starts from
`conf/sparklog-defaults.conf` (or `--config-file`). A user error (unknown topic, unreachable
bootstrap server, bad setting) prints one `error: ...` line and exits 1.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from sparklog.cli.common import DEFAULTS_FILE, PRINT_FLAGS, CliError, server_settings
from sparklog.cli.configs import add_configs_parser, cmd_configs
from sparklog.cli.groups import add_groups_parser, cmd_groups
from sparklog.cli.offsets import add_offsets_parsers, cmd_delete_records, cmd_get_offsets
from sparklog.cli.quotas import add_quotas_parser, cmd_quotas
from sparklog.cli.reassign import add_reassign_parser, cmd_reassign
from sparklog.cli.records import cmd_consume, cmd_produce
from sparklog.cli.security import add_security_parsers, cmd_acls, cmd_users
from sparklog.cli.serve import cmd_serve, serve_spark, stop_on_signals
from sparklog.cli.tables import add_tables_parser, cmd_tables
from sparklog.cli.topics import cmd_topics
from sparklog.client.config import ConfigError
from sparklog.errors import KafkaError

__all__ = ["CliError", "main", "serve_spark", "server_settings", "stop_on_signals"]


# -- parser and main ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sparklog", description=__doc__.split("\n")[0])
    parser.add_argument("--log-level", default="WARNING", help="Python logging level (WARNING)")
    parser.add_argument("--version", action="version", version=f"sparklog {version()}",
                        help="print sparklog's version and exit")  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run a controller and brokers until stopped")
    serve.add_argument("--brokers", type=int, default=1, help="number of brokers (1)")
    serve.add_argument("--data-dir", help="controller and broker data (default: a temp dir)")
    serve.add_argument(
        "--master", help="Spark master (default local[brokers+1]); 'none' runs in this process"
    )
    serve.add_argument(
        "--broker-processes",
        action="store_true",
        help="with --master none: each broker in a child process of its own, as Spark "
        "executors run them, instead of threads sharing one interpreter lock",
    )
    serve.add_argument("--config", action="append", metavar="K=V", help="cluster/broker setting")
    serve.add_argument("--config-file", help=f"properties file (default conf/{DEFAULTS_FILE})")
    serve.add_argument(
        "--add-scram",
        action="append",
        metavar="MECHANISM=[name=U,password=P]",
        help="a SCRAM credential created at start when missing (kafka-storage format "
        "--add-scram syntax; repeatable)",
    )

    def client_command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
        sub.add_argument("--command-config", metavar="FILE", help="client properties file")
        return sub

    topics = client_command("topics", "create, list, describe or delete topics")
    topics.add_argument("action", choices=("create", "list", "describe", "alter", "delete"))
    topics.add_argument("--topic")
    topics.add_argument("--partitions", type=int, default=-1, help="(the broker's num.partitions)")
    topics.add_argument("--replication-factor", type=int, default=-1)
    topics.add_argument("--config", action="append", metavar="K=V", help="topic config")
    topics.add_argument("--delete-config", action="append", metavar="K", help="alter: unset")
    topics.add_argument("--if-not-exists", action="store_true")

    produce = client_command("produce", "send stdin's lines as records")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--key-separator", help="lines are KEY<sep>VALUE (parse.key=true)")
    produce.add_argument("--partition", type=int, help="send every record to this partition")
    produce.add_argument("--header", action="append", metavar="K=V", help="header on every record")
    produce.add_argument("--property", "--producer-property", action="append", metavar="K=V",
                         help="producer setting (or parse.key, key.separator)")  # fmt: skip

    consume = client_command("consume", "print records of a topic")
    consume.add_argument("--topic", required=True)
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--partition", type=int)
    consume.add_argument("--group", help="consume as this consumer group, committing offsets")
    consume.add_argument("--offset", help="earliest, latest or an offset (with --partition)")
    consume.add_argument("--max-messages", type=int)
    consume.add_argument("--timeout-ms", type=int, help="exit after this long without a record")
    for flag in PRINT_FLAGS:
        consume.add_argument(f"--print-{flag}", action="store_true")
    consume.add_argument("--key-separator", help="between printed fields (a tab)")
    consume.add_argument("--property", "--consumer-property", action="append", metavar="K=V",
                         help="consumer setting (or print.key, key.separator, ...)")  # fmt: skip
    add_groups_parser(commands, client_command)
    add_security_parsers(commands, client_command)
    add_quotas_parser(client_command)
    add_reassign_parser(commands, client_command)
    add_configs_parser(client_command)
    add_offsets_parsers(client_command)
    add_tables_parser(client_command)
    return parser


def version() -> str:
    """The installed distribution's version (what `pip show sparklog` says)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version("sparklog")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        logging.basicConfig(
            level=args.log_level.upper(),
            stream=sys.stderr,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "topics":
            return cmd_topics(args, sys.stdout)
        if args.command == "produce":
            return cmd_produce(args, sys.stdin.buffer)
        if args.command == "groups":
            return cmd_groups(args, sys.stdout)
        if args.command == "acls":
            return cmd_acls(args, sys.stdout)
        if args.command == "users":
            return cmd_users(args, sys.stdout)
        if args.command == "quotas":
            return cmd_quotas(args, sys.stdout)
        if args.command == "reassign-partitions":
            return cmd_reassign(args, sys.stdout)
        if args.command == "configs":
            return cmd_configs(args, sys.stdout)
        if args.command == "get-offsets":
            return cmd_get_offsets(args, sys.stdout)
        if args.command == "delete-records":
            return cmd_delete_records(args, sys.stdout)
        if args.command == "tables":
            return cmd_tables(args, sys.stdout)
        return cmd_consume(args, sys.stdout.buffer)
    except (CliError, KafkaError, ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `... consume | head`: the reader went away
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
