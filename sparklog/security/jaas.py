"""Kafka's JAAS configuration syntax (`sasl.jaas.config`), parsed for servers and clients alike.

Theory of operation: a JAAS config value is a list of login-module entries,

    <loginModuleClass> <controlFlag> (<optionName>=<optionValue>)* ;

e.g. ``org.apache.kafka.common.security.plain.PlainLoginModule required username="alice"
password="alice-secret";``. Kafka parses it with a `java.io.StreamTokenizer` configured in
`org.apache.kafka.common.security.JaasConfig`; this module follows the same token rules:

- characters 0..32 are white space (so are line ends);
- ``;`` and ``=`` are single-character tokens, everything else up to them or white space is a
  word (so an unquoted value is one word: ``user_alice=secret``);
- ``"..."`` and ``'...'`` quote a value, with Java's escapes (``\\"``, ``\\\\``, ``\\n``,
  ``\\t``, octal ``\\101``; any other escaped character stands for itself);
- ``//`` and a lone ``/`` start a comment to the end of the line, ``/* ... */`` a block
  comment (StreamTokenizer's ``commentChar('/')`` plus ``slashSlashComments``/
  ``slashStarComments``), so a value holding ``/`` must be quoted.

Two deliberate departures, both turning a silent surprise into an error: a quote left open
(StreamTokenizer ends it at the line end or input end, so a truncated password would be
accepted) and an option given twice (Java keeps the last one) are refused.

Option values are credentials (passwords, `user_<name>` entries, client secrets): no error
message, `repr` or log line here ever contains one. Errors name the entry, the option *key* and
what is wrong, never the value.

This module is independent of `sparklog.security.sasl` on purpose: clients (`client/`, the
Spark options) read their own login module's `username`/`password`, servers read the
`user_<name>` options of `PlainLoginModule`, both through `parse_login_module`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "OAUTHBEARER_LOGIN_MODULE",
    "PLAIN_LOGIN_MODULE",
    "SCRAM_LOGIN_MODULE",
    "ControlFlag",
    "JaasConfigError",
    "LoginModule",
    "login_module_for_mechanism",
    "parse_jaas_config",
    "parse_login_module",
]

PLAIN_LOGIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE: Final = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
)

_LOGIN_MODULES: Final = {
    "PLAIN": PLAIN_LOGIN_MODULE,
    "SCRAM-SHA-256": SCRAM_LOGIN_MODULE,
    "SCRAM-SHA-512": SCRAM_LOGIN_MODULE,
    "OAUTHBEARER": OAUTHBEARER_LOGIN_MODULE,
}

#: Longest word an error message may quote (a class name or a control flag); longer words,
#: and every quoted value, are never echoed.
_ECHO_MAX_CHARS: Final = 120


class JaasConfigError(ValueError):
    """A `sasl.jaas.config` value that does not parse; the message never holds a value."""


class ControlFlag(enum.Enum):
    """JAAS's `LoginModuleControlFlag` (Kafka accepts them case-insensitively)."""

    REQUIRED = "required"
    REQUISITE = "requisite"
    SUFFICIENT = "sufficient"
    OPTIONAL = "optional"


class _Secret(str):
    """An option value: a `str` whose repr hides it (it may be a password)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "'[hidden]'"


@dataclass(frozen=True, slots=True)
class LoginModule:
    """One JAAS entry: the login module's class, its control flag and its options.

    `options` values may be secrets: `repr` lists the option names only.
    """

    class_name: str
    control_flag: ControlFlag
    options: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        names = ", ".join(sorted(self.options))
        return f"LoginModule({self.class_name}, {self.control_flag.value}, options=[{names}])"

    __str__ = __repr__

    def option(self, key: str, default: str | None = None) -> str | None:
        """The option `key`, or `default` when absent."""
        return self.options.get(key, default)

    def require(self, key: str) -> str:
        """The option `key`; JaasConfigError naming it when absent or empty."""
        value = self.options.get(key)
        if not value:
            raise JaasConfigError(
                f"JAAS config of {self.class_name} lacks the option {key!r}: "
                f'add {key}="..." before the closing ";"'
            )
        return value

    def prefixed(self, prefix: str) -> dict[str, str]:
        """The options whose key starts with `prefix`, keyed by the rest (`user_alice` with
        prefix `user_` -> `alice`): PlainLoginModule's users, OAUTHBEARER's
        `unsecuredLoginStringClaim_<name>` claims."""
        return {k[len(prefix) :]: v for k, v in self.options.items() if k.startswith(prefix)}


# -- tokenizer ---------------------------------------------------------------------------


class _Kind(enum.Enum):
    WORD = "word"
    QUOTED = "quoted value"
    SEMICOLON = '";"'
    EQUALS = '"="'


@dataclass(frozen=True, slots=True)
class _Token:
    kind: _Kind
    text: str
    line: int


_SIMPLE_ESCAPES: Final = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}


def _tokens(text: str) -> Iterator[_Token]:
    """StreamTokenizer's tokens under JaasConfig's syntax table (see the module doc)."""
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c <= " ":
            line += c == "\n"
            i += 1
        elif c == "/":
            if text.startswith("/*", i):
                end = text.find("*/", i + 2)
                if end < 0:
                    raise JaasConfigError(
                        f"JAAS config has a '/*' comment never closed (line {line})"
                    )
                line += text.count("\n", i, end)
                i = end + 2
            else:  # '//' or a lone '/': a comment to the end of the line
                end = text.find("\n", i)
                i = n if end < 0 else end
        elif c in ";=":
            yield _Token(_Kind.SEMICOLON if c == ";" else _Kind.EQUALS, c, line)
            i += 1
        elif c in "\"'":
            value, i, start_line = _quoted(text, i, line)
            yield _Token(_Kind.QUOTED, value, start_line)
        else:
            start = i
            while i < n and text[i] > " " and text[i] not in ";=\"'/":
                i += 1
            yield _Token(_Kind.WORD, text[start:i], line)


def _quoted(text: str, i: int, line: int) -> tuple[str, int, int]:
    """The value of the quoted string opening at `text[i]`, and the index after it."""
    quote, i, n = text[i], i + 1, len(text)
    out: list[str] = []
    while i < n:
        c = text[i]
        if c == quote:
            return "".join(out), i + 1, line
        if c in "\r\n":
            break
        if c == "\\" and i + 1 < n:
            e = text[i + 1]
            if e in "01234567":  # up to three octal digits, at most \377, as StreamTokenizer
                j = i + 1
                limit = i + (4 if e in "0123" else 3)
                while j < min(limit, n) and text[j] in "01234567":
                    j += 1
                out.append(chr(int(text[i + 1 : j], 8)))
                i = j
                continue
            out.append(_SIMPLE_ESCAPES.get(e, e))
            i += 2
            continue
        out.append(c)
        i += 1
    raise JaasConfigError(
        f"JAAS config has a value whose opening {quote} is never closed (line {line}): "
        f"close it with {quote} on the same line, and escape a {quote} inside it as \\{quote}"
    )


# -- parser ------------------------------------------------------------------------------


def _echo(token: _Token) -> str:
    """A token as an error message may show it: words only, never quoted values."""
    if token.kind is _Kind.WORD and len(token.text) <= _ECHO_MAX_CHARS:
        return repr(token.text)
    return f"a {token.kind.value}" if token.kind is not _Kind.WORD else "a long word"


def parse_jaas_config(text: str) -> list[LoginModule]:
    """Every login-module entry of a JAAS config value, in order (Kafka's `JaasConfig`).

    Raises JaasConfigError naming the problem (and never a value) when it does not parse.
    """
    tokens = list(_tokens(text))
    entries: list[LoginModule] = []
    i = 0
    while i < len(tokens):
        entry, i = _entry(tokens, i)
        entries.append(entry)
    if not entries:
        raise JaasConfigError(
            "Login module not specified in JAAS config: expected "
            '<loginModuleClass> required <option>="<value>" ... ;'
        )
    return entries


def _entry(tokens: list[_Token], i: int) -> tuple[LoginModule, int]:
    head = tokens[i]
    if head.kind is not _Kind.WORD:
        raise JaasConfigError(
            f"JAAS config entry must start with a login module class name, found "
            f"{_echo(head)} (line {head.line})"
        )
    class_name = head.text
    if i + 1 >= len(tokens) or tokens[i + 1].kind is not _Kind.WORD:
        raise JaasConfigError(
            f"Login module control flag not specified in JAAS config after {class_name!r}: "
            "add 'required' after the class name"
        )
    flag_token = tokens[i + 1]
    try:
        flag = ControlFlag(flag_token.text.lower())
    except ValueError:
        raise JaasConfigError(
            f"Invalid login module control flag {_echo(flag_token)} in JAAS config "
            f"(line {flag_token.line}): use required, requisite, sufficient or optional"
        ) from None
    options: dict[str, str] = {}
    i += 2
    while i < len(tokens) and tokens[i].kind is not _Kind.SEMICOLON:
        key = tokens[i]
        if key.kind is not _Kind.WORD:
            raise JaasConfigError(
                f"JAAS config of {class_name} has {_echo(key)} where an option name belongs "
                f'(line {key.line}): write options as name="value"'
            )
        has_value = (
            i + 2 < len(tokens)
            and tokens[i + 1].kind is _Kind.EQUALS
            and tokens[i + 2].kind in (_Kind.WORD, _Kind.QUOTED)
        )
        if not has_value:
            raise JaasConfigError(
                f"Value not specified for key {_echo(key)} in JAAS config of {class_name} "
                f'(line {key.line}): write {key.text}="value"'
            )
        if key.text in options:
            raise JaasConfigError(
                f"JAAS config of {class_name} sets the option {_echo(key)} twice "
                f"(line {key.line}): keep one"
            )
        options[key.text] = _Secret(tokens[i + 2].text)
        i += 3
    if i >= len(tokens):
        raise JaasConfigError(
            f"JAAS config entry {class_name} not terminated by semi-colon: end it with ';'"
        )
    return LoginModule(class_name, flag, options), i + 1


def parse_login_module(text: str, *, mechanism: str | None = None) -> LoginModule:
    """The single login module of a `sasl.jaas.config` value (Kafka's `JaasContext` demands
    exactly one), checked against `mechanism`'s login module when given."""
    entries = parse_jaas_config(text)
    if len(entries) != 1:
        raise JaasConfigError(
            f"JAAS config property contains {len(entries)} login modules, should be 1 module"
        )
    entry = entries[0]
    if mechanism is not None:
        expected = login_module_for_mechanism(mechanism)
        if expected is not None and entry.class_name != expected:
            raise JaasConfigError(
                f"JAAS config names login module {entry.class_name} but SASL mechanism "
                f"{mechanism} needs {expected}"
            )
    return entry


def login_module_for_mechanism(mechanism: str) -> str | None:
    """The login module class Kafka pairs with a SASL mechanism (None when unknown)."""
    return _LOGIN_MODULES.get(mechanism.upper())
