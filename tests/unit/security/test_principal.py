"""principal.py: Kafka's DefaultKafkaPrincipalBuilder and SslPrincipalMapper (the cases of
Kafka's own SslPrincipalMapperTest, and DNs from real trustme certificates)."""

from __future__ import annotations

import datetime

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sparklog.security.principal import (
    NoMatchingRule,
    PrincipalBuilder,
    SslPrincipalMapper,
    distinguished_name,
)
from sparklog.security.session import ANONYMOUS, KafkaPrincipal
from sparklog.settings import ConfigError


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ],
)
def test_valid_rules(rules):
    SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ],
)
def test_invalid_rules_are_refused_naming_the_setting(rules):
    with pytest.raises(ConfigError, match="ssl.principal.mapping.rules: invalid rule"):
        SslPrincipalMapper(rules)


def test_a_regex_that_does_not_compile_is_refused():
    with pytest.raises(ConfigError, match="does not compile"):
        SslPrincipalMapper("RULE:^CN=(.*/$1/")


def test_mapping():
    mapper = SslPrincipalMapper(
        ", ".join(
            [
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
                "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
                "DEFAULT",
            ]
        )
    )
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    dn = "OU=JavaSoft,O=Sun Microsystems,C=US"
    assert mapper.name(dn) == dn


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ("", "[]"),
        ("DEFAULT", "[DEFAULT]"),
        ("RULE://", "[RULE:/]"),
        ("RULE:/.*/", "[RULE:/.*]"),
        ("RULE:/.*/L", "[RULE:/.*/L]"),
        ("RULE://,DEFAULT", "[RULE:/, DEFAULT]"),
        ("  RULE:// ,  DEFAULT  ", "[RULE:/, DEFAULT]"),
        ("  RULE:   /     / ,  DEFAULT  ", "[RULE:   /     , DEFAULT]"),
        ("  RULE:  /     /U   ,DEFAULT  ", "[RULE:  /     /U, DEFAULT]"),
        (
            "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
            "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]",
        ),
        (",   , , ,      , , ,   ", "[]"),
        (",,RULE://,,,DEFAULT,,", "[RULE:/, DEFAULT]"),
        (",  , RULE: /   /    ,,,   DEFAULT, ,   ", "[RULE: /   , DEFAULT]"),
        ("     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,", "[RULE:   /  /U, DEFAULT]"),
        (r"RULE:\/\\\(\)\n\t/\/\//", r"[RULE:\/\\\(\)\n\t/\/\/]"),
        (r"RULE:\**\/+/*/L,RULE:\/*\**/**/", r"[RULE:\**\/+/*/L, RULE:\/*\**/**]"),
        (
            r"RULE:,RULE:,/,RULE:,\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, "
            r"/DEFAULT/,DEFAULT",
            r"[RULE:,RULE:,/,RULE:,\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, "
            r"DEFAULT, /DEFAULT, DEFAULT]",
        ),
    ],
)
def test_rules_splitting_as_kafka(rules, expected):
    assert str(SslPrincipalMapper(rules)) == expected


def test_an_escaped_comma_inside_a_name():
    mapper = SslPrincipalMapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"


def test_java_replacement_syntax():
    # a reference to a group the regex lacks stays literal (Kafka's escapeLiteralBackReferences)
    assert SslPrincipalMapper("RULE:^CN=(.*?),.*$/$1@$4/").name("CN=a,O=b") == "a@$4"
    # $12 with one group is group 1 then "2"; \$ is a literal dollar; $0 the whole match
    assert SslPrincipalMapper("RULE:^CN=(.*?),.*$/$12/").name("CN=a,O=b") == "a2"
    assert SslPrincipalMapper(r"RULE:^CN=(.*?),.*$/\$$1/").name("CN=a,O=b") == "$a"
    assert SslPrincipalMapper("RULE:^CN=.*$/x$0/").name("CN=a") == "xCN=a"
    # an escaped slash inside the regex and the replacement
    assert SslPrincipalMapper(r"RULE:^CN=(.*)\/(.*)$/$2\/$1/").name("CN=a/b") == "b/a"


def test_no_matching_rule():
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/")
    with pytest.raises(NoMatchingRule, match="no ssl.principal.mapping.rules rule applies"):
        mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US")
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper("").name("CN=x")  # no rules at all: nothing maps


def _der(cert: trustme.LeafCert) -> bytes:
    pem = cert.cert_chain_pems[0].bytes()
    return x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)


def test_distinguished_name_is_javas_rfc2253_form(tls_ca):
    alice = tls_ca.client("alice", organization="Acme, Inc.", organizational_unit="eng")
    der = alice.certificate.public_bytes(serialization.Encoding.DER)
    assert distinguished_name(der) == r"CN=alice,OU=eng,O=Acme\, Inc."


def test_non_keyword_attributes_print_as_oid_and_der_hex():
    ca = trustme.CA()
    cert = ca.issue_cert("a@example.com", common_name="bob")
    # trustme names have no e-mail attribute: build a certificate with one
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "bob"),
            x509.NameAttribute(NameOID.EMAIL_ADDRESS, "bob@x.io"),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    built = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    dn = distinguished_name(built.public_bytes(serialization.Encoding.DER))
    # IA5String (tag 0x16), 8 bytes: what X500Principal.getName() prints
    assert dn == "1.2.840.113549.1.9.1=#1608626f6240782e696f,CN=bob"
    assert distinguished_name(_der(cert)).startswith("CN=bob,OU=")


def test_principal_builder(tls_ca):
    alice = tls_ca.client("alice")
    der = alice.certificate.public_bytes(serialization.Encoding.DER)
    default = PrincipalBuilder()
    assert default.plaintext() is ANONYMOUS
    assert default.ssl(None) is ANONYMOUS  # TLS without a client certificate
    assert default.ssl(der) == KafkaPrincipal("User", "CN=alice,OU=tests,O=sparklog")
    mapped = PrincipalBuilder.of({"ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/U"})
    assert str(mapped.ssl(der)) == "User:ALICE"
    assert str(PrincipalBuilder.sasl("bob")) == "User:bob"
    strict = PrincipalBuilder.of({"ssl.principal.mapping.rules": "RULE:^CN=(.*),OU=ops.*$/$1/"})
    with pytest.raises(NoMatchingRule):
        strict.ssl(der)


_A = x509.NameAttribute
#: subjects and what OpenJDK 17's X500Principal.getName() prints for them (recorded by running
#: it on these certificates): escaping, non-keyword attributes as OID=#DER, multi-valued RDNs
JAVA_NAMES = [
    ([_A(NameOID.ORGANIZATION_NAME, "Acme, Inc."), _A(NameOID.COMMON_NAME, "a+b=c")],
     r"CN=a\+b\=c,O=Acme\, Inc."),
    ([_A(NameOID.COMMON_NAME, ' "quoted" <x>;y\\z')], r"CN=\ \"quoted\" \<x\>\;y\\z"),
    ([_A(NameOID.COMMON_NAME, "#hash trailing ")], "CN=\\#hash trailing\\ "),
    ([_A(NameOID.COMMON_NAME, "Zoë 名前")], "CN=Zoë 名前"),
    (
        [
            _A(NameOID.DOMAIN_COMPONENT, "com"),
            _A(NameOID.DOMAIN_COMPONENT, "example"),
            _A(NameOID.USER_ID, "u1"),
            _A(NameOID.EMAIL_ADDRESS, "bob@x.io"),
        ],
        "1.2.840.113549.1.9.1=#1608626f6240782e696f,UID=u1,DC=example,DC=com",
    ),
    (
        [
            _A(NameOID.COUNTRY_NAME, "US"),
            _A(NameOID.STATE_OR_PROVINCE_NAME, "CA"),
            _A(NameOID.LOCALITY_NAME, "SF"),
            _A(NameOID.STREET_ADDRESS, "1 Main"),
            _A(NameOID.SERIAL_NUMBER, "123"),
            _A(NameOID.TITLE, "Dr"),
        ],
        "2.5.4.12=#0c024472,2.5.4.5=#1303313233,STREET=1 Main,L=SF,ST=CA,C=US",
    ),
    (
        [
            x509.RelativeDistinguishedName(
                [_A(NameOID.COMMON_NAME, "m"), _A(NameOID.ORGANIZATIONAL_UNIT_NAME, "u")]
            ),
            x509.RelativeDistinguishedName([_A(NameOID.ORGANIZATION_NAME, "o")]),
        ],
        "O=o,CN=m+OU=u",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("parts", "java"), JAVA_NAMES)
def test_distinguished_names_are_printed_as_javas_x500principal(parts, java):
    assert distinguished_name(_self_signed(x509.Name(parts))) == java


def _self_signed(name: x509.Name) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.DER)
