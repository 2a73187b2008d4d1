"""Who a connection is: Kafka's `DefaultKafkaPrincipalBuilder` and `SslPrincipalMapper`.

A PLAINTEXT connection, and a TLS one whose client sent no certificate, is `User:ANONYMOUS`;
an mTLS client is `User:` + its certificate's subject, as Java prints it (`X500Principal`'s
RFC 2253 form, `distinguished_name()`), mapped through `ssl.principal.mapping.rules`; a SASL
connection is `User:` + the mechanism's authorization id (SASL_SSL too: SASL wins over the
certificate, as in Kafka).

`ssl.principal.mapping.rules` has Kafka's syntax: a comma-separated list of `DEFAULT` (the
whole DN) and `RULE:<regex>/<replacement>/[L|U]` (the first rule whose regex matches the whole
DN gives the name, the replacement's `$n` are the regex's groups, `L`/`U` fold the case;
`\\/` is a slash inside a rule). The rules are parsed with Kafka's own rule grammar, so what
Kafka refuses is refused, and Java's replacement syntax (`$1`, `\\$`) is honoured. When no rule
matches, authentication fails (Kafka's `NoMatchingRule`) and the connection closes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.x509.oid import NameOID

from sparklog.security.session import ANONYMOUS, USER_TYPE, KafkaPrincipal
from sparklog.settings import ConfigError, ConfigType, Scope, Setting, define

PRINCIPAL_SETTINGS: Final = define(
    Setting(
        "ssl.principal.mapping.rules",
        ConfigType.STRING,
        "DEFAULT",
        doc="rules mapping an mTLS client's distinguished name to its principal name "
        "(DEFAULT, RULE:regex/replacement/[LU]; comma-separated)",
        scope=Scope.BROKER,
        group="principal",
        parser=lambda raw: str(raw),  # leading/trailing spaces are the rules' business
    )
)

# Kafka's rule grammar (SslPrincipalMapper.RULE_PATTERN): group 1 DEFAULT, 2 the regex,
# 4 the replacement, 6 the case flag; the last alternative swallows anything else, which the
# parser then refuses for not being consumed whole.
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER: Final = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_RULE_PARSER: Final = re.compile(_RULE)


class NoMatchingRule(Exception):
    """No `ssl.principal.mapping.rules` rule maps a client's distinguished name."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    to_lower: bool = False
    to_upper: bool = False

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        # Java's String.replaceAll: every match, left to right (an empty one at the end too)
        result = self.pattern.sub(lambda m: _expand(self.replacement, m), dn)
        if self.to_lower:
            return result.lower()
        return result.upper() if self.to_upper else result

    def __str__(self) -> str:  # Kafka's Rule.toString
        if self.pattern is None:
            return "DEFAULT"
        flag = "/L" if self.to_lower else "/U" if self.to_upper else ""
        return f"RULE:{self.pattern.pattern}/{self.replacement}{flag}"


def _expand(replacement: str, m: re.Match[str]) -> str:
    """Java's `Matcher.appendReplacement`: `\\x` is x, `$n` group n (the longest number not
    above the group count), a reference to a group the regex lacks is kept literally (Kafka's
    `escapeLiteralBackReferences`, taken from NiFi)."""
    groups = m.re.groups
    out: list[str] = []
    i = 0
    while i < len(replacement):
        c = replacement[i]
        if c == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
            continue
        if c == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            j = i + 2
            number = int(replacement[i + 1])
            if number > groups and groups and replacement[i + 1] != "0":
                out.append("$")  # no such group: literal (escapeLiteralBackReferences)
                i += 1
                continue
            if number > groups:
                raise NoMatchingRule(f"the replacement refers to group {number}, which the "
                                     f"rule's regex does not have")  # fmt: skip
            while j < len(replacement) and replacement[j].isdigit():
                longer = number * 10 + int(replacement[j])
                if longer > groups:
                    break
                number, j = longer, j + 1
            out.append(m.group(number) or "")
            i = j
            continue
        if c == "$":
            raise NoMatchingRule("the replacement has a '$' that is not a group reference")
        out.append(c)
        i += 1
    return "".join(out)


class SslPrincipalMapper:
    """`ssl.principal.mapping.rules`, parsed (see the module doc)."""

    def __init__(self, rules: str | None = "DEFAULT") -> None:
        # None is DEFAULT; an empty string is no rule at all (nothing maps), as in Kafka
        parsed = (self._parse(part) for part in self._split("DEFAULT" if rules is None else rules))
        self.rules = tuple(r for r in parsed if r is not None)

    @staticmethod
    def _split(rules: str) -> list[str]:
        return [m.group(1) for m in _RULE_SPLITTER.finditer(rules.strip())]

    @staticmethod
    def _parse(text: str) -> _Rule | None:
        m = _RULE_PARSER.match(text)
        if m is None or m.end() != len(text):
            tail = text[m.end() :] if m is not None else text
            raise ConfigError(
                f"ssl.principal.mapping.rules: invalid rule {text!r} (unmatched {tail!r}); a "
                "rule is DEFAULT or RULE:<regex>/<replacement>/ with an optional L or U"
            )
        if m.group(1) is not None:
            return _Rule(None)
        if m.group(2) is None:
            return None  # an empty rule (",,"), ignored as Kafka does
        try:
            pattern = re.compile(m.group(2))
        except re.error as e:
            raise ConfigError(
                f"ssl.principal.mapping.rules: the regex of {text!r} does not compile: {e}"
            ) from None
        flag = m.group(6)
        return _Rule(pattern, m.group(4), flag == "L", flag == "U")

    def name(self, distinguished_name: str) -> str:
        """The principal name of `distinguished_name`; NoMatchingRule when no rule applies."""
        for rule in self.rules:
            if (mapped := rule.apply(distinguished_name)) is not None:
                return mapped
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to "
                             f"{distinguished_name!r} (rules {self})")  # fmt: skip

    def __str__(self) -> str:
        return "[" + ", ".join(str(r) for r in self.rules) + "]"


# -- distinguished names as Java prints them --------------------------------------------------

#: The attribute keywords RFC 2253 (and Java's X500Principal.RFC2253) print by name; any other
#: attribute prints as its OID and `#` + the hex of its DER value.
_KEYWORDS: Final = {
    NameOID.COMMON_NAME: "CN",
    NameOID.COUNTRY_NAME: "C",
    NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST",
    NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.STREET_ADDRESS: "STREET",
    NameOID.DOMAIN_COMPONENT: "DC",
    NameOID.USER_ID: "UID",
}
_STRING_CODECS: Final = {30: "utf-16-be", 28: "utf-32-be"}  # BMPString, UniversalString


def distinguished_name(certificate_der: bytes) -> str:
    """A certificate's subject in Java's `X500Principal.getName()` (RFC 2253) form: the last
    RDN first, `CN=alice,OU=eng,O=example`."""
    subject = x509.load_der_x509_certificate(certificate_der).subject
    return ",".join("+".join(_ava(a) for a in rdn) for rdn in reversed(subject.rdns))


def _ava(attribute: x509.NameAttribute) -> str:
    keyword = _KEYWORDS.get(attribute.oid)
    value = attribute.value if isinstance(attribute.value, str) else attribute.value.decode()
    if keyword is not None:
        return f"{keyword}={_escape(value)}"
    tag = int(attribute._type.value)  # the ASN.1 string type the certificate used
    encoded = value.encode(_STRING_CODECS.get(tag, "utf-8"))
    return f"{attribute.oid.dotted_string}=#{_der(tag, encoded).hex()}"


def _escape(value: str) -> str:
    """RFC 2253 §2.4 escaping, as Java applies it (which escapes `=` too)."""
    out = []
    for i, c in enumerate(value):
        if c in ',=+"\\<>;' or (c == "#" and i == 0) or (c == " " and i in (0, len(value) - 1)):
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)


def _der(tag: int, content: bytes) -> bytes:
    n = len(content)
    if n < 0x80:
        return bytes([tag, n]) + content
    length = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(length)]) + length + content


# -- the principal builder --------------------------------------------------------------------


class PrincipalBuilder:
    """Kafka's `DefaultKafkaPrincipalBuilder` for one listener."""

    def __init__(self, mapper: SslPrincipalMapper | None = None) -> None:
        self.mapper = mapper or SslPrincipalMapper()

    @classmethod
    def of(cls, props: Mapping[str, object]) -> PrincipalBuilder:
        """From a listener's settings (`ssl.principal.mapping.rules`)."""
        values = PRINCIPAL_SETTINGS.parse(props, unknown="ignore")
        return cls(SslPrincipalMapper(values.get("ssl_principal_mapping_rules", "DEFAULT")))

    @staticmethod
    def plaintext() -> KafkaPrincipal:
        return ANONYMOUS

    def ssl(self, peer_certificate_der: bytes | None) -> KafkaPrincipal:
        """A TLS peer: ANONYMOUS without a certificate, else its mapped subject; raises
        NoMatchingRule when no rule maps it (the connection then fails authentication)."""
        if not peer_certificate_der:
            return ANONYMOUS
        return KafkaPrincipal(USER_TYPE, self.mapper.name(distinguished_name(peer_certificate_der)))

    @staticmethod
    def sasl(authorization_id: str) -> KafkaPrincipal:
        return KafkaPrincipal(USER_TYPE, authorization_id)
