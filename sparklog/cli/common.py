"""Shared pieces of the CLI: settings, bootstrap checks, the admin client, user errors."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sparklog.client.config import ConfigError, parse_bootstrap_servers
from sparklog.protocol.outbound import Endpoint, open_socket

DEFAULTS_FILE = "sparklog-defaults.conf"
CONNECT_TIMEOUT_S = 5.0
POLL_MS = 200
PRINT_FLAGS = ("key", "offset", "partition", "timestamp", "headers")
SPARK_STOP_TIMEOUT_S = 30.0


class CliError(Exception):
    """A user error: printed as `error: <message>`, exit code 1, no traceback."""


# -- settings ----------------------------------------------------------------------------------


def parse_pairs(pairs: Sequence[str] | None, option: str) -> dict[str, str]:
    """`["a=1", "b=x=y"]` as `{"a": "1", "b": "x=y"}`; a pair without `=` is a user error."""
    out: dict[str, str] = {}
    for pair in pairs or ():
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise CliError(f"{option} expects name=value, got {pair!r}")
        out[name.strip()] = value.strip()
    return out


def read_properties_file(path: str | Path) -> dict[str, str]:
    """A Java-style properties file as a dict (a missing or bad file is a user error)."""
    from sparklog.metadata.configs import read_properties

    try:
        return read_properties(path)
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise CliError(str(e)) from None


def default_config_file() -> Path | None:
    """`$SPARKLOG_CONF_DIR/sparklog-defaults.conf`, else the project's `conf/` copy, if any."""
    conf_dir = os.environ.get("SPARKLOG_CONF_DIR")
    candidates = [Path(conf_dir)] if conf_dir else []
    candidates.append(Path(__file__).resolve().parent.parent / "conf")
    for directory in candidates:
        if (directory / DEFAULTS_FILE).is_file():
            return directory / DEFAULTS_FILE
    return None


def server_settings(args: argparse.Namespace) -> dict[str, str]:
    """Cluster settings for `serve`: the defaults file, then each `--config k=v`."""
    path = args.config_file if args.config_file is not None else default_config_file()
    settings = read_properties_file(path) if path else {}
    settings.update(parse_pairs(args.config, "--config"))
    add_scram = getattr(args, "add_scram", None)
    if add_scram:
        from sparklog.metadata.scram_bootstrap import ADD_SCRAM, parse_entries

        parse_entries(add_scram)  # a mistake fails here, naming the entry (never a password)
        settings[ADD_SCRAM] = ";".join([settings.get(ADD_SCRAM, ""), *add_scram]).strip(";")
    return settings


def client_settings(args: argparse.Namespace, **defaults: Any) -> dict[str, Any]:
    """Client settings: CLI defaults < `--command-config FILE` < `--property` < the bootstrap."""
    settings: dict[str, Any] = dict(defaults)
    if getattr(args, "command_config", None):
        settings.update(read_properties_file(args.command_config))
    settings.update(parse_pairs(getattr(args, "property", None), "--property"))
    settings["bootstrap.servers"] = args.bootstrap_server
    return settings


def check_bootstrap(bootstrap: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Fail fast with a clear message when no bootstrap server accepts a connection."""
    try:
        addresses = parse_bootstrap_servers(tuple(s.strip() for s in bootstrap.split(",")))
    except ConfigError as e:
        raise CliError(f"--bootstrap-server: {e}") from None
    problems = []
    for host, port in addresses:
        try:
            with open_socket(Endpoint(host, port), timeout_s=timeout_s):
                return
        except OSError as e:
            problems.append(f"{host}:{port}: {e.strerror or e}")
    raise CliError(
        f"cannot connect to any bootstrap server ({'; '.join(problems)}); is a sparklog "
        "cluster running there? Start one with `python -m sparklog serve`"
    )


def progress(message: str) -> None:
    print(f"sparklog: {message}", file=sys.stderr, flush=True)


def admin_client(args: argparse.Namespace) -> Any:
    from sparklog.client import AdminClient

    check_bootstrap(args.bootstrap_server)
    return AdminClient(client_settings(args))
