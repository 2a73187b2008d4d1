"""Secrets in Spark's conf and query plans: which sparklog settings hold them, and whether
Spark's redaction hides them.

Spark shows its conf in the UI's Environment tab and writes it to the event log, replacing a
value with `*********(redacted)` when `spark.redaction.regex` (default
`(?i)secret|password|token|access[.]?key`) matches the key or the value (Spark's
`Utils.redact`); data source options in plans are redacted by `spark.sql.redaction.options.regex`
(default `(?i)url`) on top of it. Kafka's secret settings do not all match the default: a
`sasl.jaas.config` holding only `user_<name>="..."` entries, or an inline PEM key in
`ssl.keystore.key`, would be shown. `sparklog.start` therefore refuses `spark.sparklog.*` secrets
the regex misses (naming the keys, never the values, and the regex that covers them), and
`sparklog.register` widens the session's options regex so `kafka.sasl.jaas.config` and
`kafka.ssl.keystore.key` options never print in a plan.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

from sparklog.settings import REGISTRY, ConfigType, Scope

#: Spark's default `spark.redaction.regex`.
SPARK_REDACTION_REGEX: Final = r"(?i)secret|password|token|access[.]?key"
#: What else holds Kafka secrets: JAAS configs (passwords, `user_<name>` tables, client
#: secrets) and inline PEM keys.
SPARKLOG_SECRET_NAMES: Final = r"jaas|ssl[.]keystore[.]key|ssl[.]key[.]password"
#: A `spark.redaction.regex` that covers Spark's defaults and sparklog's secrets.
SUGGESTED_REDACTION_REGEX: Final = f"{SPARK_REDACTION_REGEX}|{SPARKLOG_SECRET_NAMES}"

_LISTENER_PREFIX = re.compile(r"^listener[.]name[.][^.]+[.]")
_MECHANISM_PREFIX = re.compile(r"^(plain|scram-sha-256|scram-sha-512|oauthbearer|gssapi)[.]")


def is_secret_setting(name: str) -> bool:
    """Whether a Kafka-named setting holds a secret (a PASSWORD or sensitive setting in the
    registry, also under a `listener.name.<l>.[<mechanism>.]` prefix, or a JAAS config)."""
    base = _MECHANISM_PREFIX.sub("", _LISTENER_PREFIX.sub("", name.lower()))
    base = base.removeprefix("kafka.")
    if base.endswith("sasl.jaas.config") or re.search(SPARKLOG_SECRET_NAMES, base):
        return True
    setting = REGISTRY.find(base, tuple(Scope))
    return setting is not None and (setting.sensitive or setting.type == ConfigType.PASSWORD)


def unredacted_secrets(
    conf_entries: Iterable[tuple[str, Any]], redaction_regex: str | None, prefix: str
) -> list[str]:
    """Keys of `prefix`ed conf entries holding secrets that `redaction_regex` would show
    (it matches neither the key nor the value)."""
    pattern = _python_regex(redaction_regex or SPARK_REDACTION_REGEX)
    return sorted(
        key
        for key, value in conf_entries
        if key.startswith(prefix)
        and is_secret_setting(key[len(prefix) :])
        and not (pattern.search(key) or pattern.search(str(value)))
    )


def options_regex_covering_secrets(current: str | None) -> str | None:
    """A `spark.sql.redaction.options.regex` that also matches `kafka.sasl.jaas.config` and
    `kafka.ssl.keystore.key`, or None when `current` already does."""
    current = current or "(?i)url"
    pattern = _python_regex(current)
    if all(pattern.search(k) for k in ("kafka.sasl.jaas.config", "kafka.ssl.keystore.key")):
        return None
    return f"{current}|(?i:{SPARKLOG_SECRET_NAMES})"


def _python_regex(java_regex: str) -> re.Pattern[str]:
    """Spark's regexes are Java's; the ones used for redaction are also valid Python (an
    inline `(?i)` flag in the middle is not: Python wants it first, so it is hoisted)."""
    flags = re.IGNORECASE if "(?i)" in java_regex else 0
    return re.compile(java_regex.replace("(?i)", ""), flags)
