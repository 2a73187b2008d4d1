"""The server-side SASL mechanisms, sans-IO: PLAIN, SCRAM-SHA-256/512 (driven by scramp's real
client), OAUTHBEARER (unsecured JWS and signed JWTs against a JWKS file)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import jwt
import pytest
import scramp
from cryptography.hazmat.primitives.asymmetric import rsa

from sparklog.errors import SaslAuthenticationFailedError
from sparklog.security.credentials import ScramCredential, ScramMechanism
from sparklog.security.jaas import parse_login_module
from sparklog.security.sasl import SaslMechanisms
from sparklog.security.sasl.mechanism import SaslError
from sparklog.security.sasl.oauthbearer import (
    JwksValidator,
    OAuthBearerServer,
    UnsecuredJwsValidator,
    load_jwks,
)
from sparklog.security.sasl.plain import PlainServer, PlainUsers
from sparklog.security.sasl.scram import InMemoryCredentialStore, ScramServer

NOW_MS = 1_800_000_000_000
USERS = PlainUsers.from_login_module(
    parse_login_module(
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-pw" user_admin="admin-pw" user_alice="alice-pw";'
    )
)

# -- PLAIN ---------------------------------------------------------------------------------


def test_plain_accepts_a_configured_user() -> None:
    server = PlainServer(USERS)
    assert server.evaluate_response(b"\x00alice\x00alice-pw", NOW_MS) == b""
    assert server.is_complete and server.authorization_id == "alice"
    same_authzid = PlainServer(USERS)
    same_authzid.evaluate_response(b"alice\x00alice\x00alice-pw", NOW_MS)
    assert same_authzid.authorization_id == "alice"


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (b"\x00alice\x00wrong", "Invalid username or password"),
        (b"\x00mallory\x00alice-pw", "Invalid username or password"),
        (b"\x00\x00alice-pw", "username not specified"),
        (b"\x00alice\x00", "password not specified"),
        (b"admin\x00alice\x00alice-pw", "authorization id that is different from username"),
    ],
)
def test_plain_failures_with_kafkas_messages(response: bytes, message: str) -> None:
    server = PlainServer(USERS)
    with pytest.raises(SaslAuthenticationFailedError, match=message) as info:
        server.evaluate_response(response, NOW_MS)
    assert "alice-pw" not in str(info.value) and not server.is_complete


@pytest.mark.parametrize("response", [b"alice-pw", b"a\x00b\x00c\x00d", b"\x00\xff\xfe\x00pw"])
def test_plain_malformed_is_a_generic_failure(response: bytes) -> None:
    with pytest.raises(SaslError):
        PlainServer(USERS).evaluate_response(response, NOW_MS)


# -- SCRAM ---------------------------------------------------------------------------------


def _store(mechanism: ScramMechanism, user: str, password: str) -> InMemoryCredentialStore:
    store = InMemoryCredentialStore()
    store.add_password(mechanism, user, password)
    return store


def _scram_login(server: ScramServer, mechanism: ScramMechanism, user: str, password: str) -> None:
    client = scramp.ScramClient([mechanism.mechanism_name], user, password)
    server_first = server.evaluate_response(client.get_client_first().encode(), NOW_MS)
    client.set_server_first(server_first.decode())
    server_final = server.evaluate_response(client.get_client_final().encode(), NOW_MS)
    client.set_server_final(server_final.decode())  # the client checks the server's signature


@pytest.mark.parametrize("mechanism", [ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512])
def test_scram_login_with_scramps_client(mechanism: ScramMechanism) -> None:
    server = ScramServer(mechanism, _store(mechanism, "alice", "alice-pw"))
    _scram_login(server, mechanism, "alice", "alice-pw")
    assert server.is_complete and server.authorization_id == "alice"
    assert server.credential_expiry_ms is None


def test_scram_user_names_with_comma_and_equals_are_unescaped() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    server = ScramServer(mechanism, _store(mechanism, "o=acme,u=bob", "pw"))
    _scram_login(server, mechanism, "o=acme,u=bob", "pw")
    assert server.authorization_id == "o=acme,u=bob"


def test_scram_extensions_are_ignored_but_signed() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_512
    server = ScramServer(mechanism, _store(mechanism, "alice", "pw"))
    client = scramp.ScramClient([mechanism.mechanism_name], "alice", "pw")
    first = client.get_client_first() + ",traceid=42"
    client.client_first_bare += ",traceid=42"
    client.set_server_first(server.evaluate_response(first.encode(), NOW_MS).decode())
    client.set_server_final(
        server.evaluate_response(client.get_client_final().encode(), NOW_MS).decode()
    )
    assert server.is_complete


def test_scram_wrong_password_unknown_user_wrong_mechanism_fail() -> None:
    sha256 = ScramMechanism.SCRAM_SHA_256
    store = _store(sha256, "alice", "alice-pw")
    with pytest.raises(SaslError):
        _scram_login(ScramServer(sha256, store), sha256, "alice", "wrong")
    with pytest.raises(SaslError, match="Invalid user credentials"):
        _scram_login(ScramServer(sha256, store), sha256, "mallory", "alice-pw")
    sha512 = ScramMechanism.SCRAM_SHA_512
    with pytest.raises(SaslError, match="Invalid user credentials"):
        _scram_login(ScramServer(sha512, store), sha512, "alice", "alice-pw")


def test_scram_refuses_low_iterations_tokenauth_authzid_and_garbage() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    salt, stored, server_key, _ = scramp.ScramMechanism("SCRAM-SHA-256").make_auth_info("pw", 4096)

    class Weak:
        def scram_credential(self, m: ScramMechanism, user: str) -> ScramCredential:
            return ScramCredential(salt, stored, server_key, 4095)

    with pytest.raises(SaslError, match="less than the minimum 4096"):
        ScramServer(mechanism, Weak()).evaluate_response(b"n,,n=alice,r=abc", NOW_MS)
    store = _store(mechanism, "alice", "pw")
    with pytest.raises(SaslError, match="delegation-token"):
        ScramServer(mechanism, store).evaluate_response(b"n,,n=alice,r=abc,tokenauth=true", NOW_MS)
    with pytest.raises(SaslAuthenticationFailedError, match="different from username"):
        ScramServer(mechanism, store).evaluate_response(b"n,a=bob,n=alice,r=abc", NOW_MS)
    for garbage in (b"", b"\xff\xfe", b"n,,", b"n,,n=alice", b"x,,n=alice,r=a", b"n,,n=a=4,r=abc"):
        with pytest.raises(SaslError):
            ScramServer(mechanism, store).evaluate_response(garbage, NOW_MS)
    server = ScramServer(mechanism, store)
    server.evaluate_response(b"n,,n=alice,r=abc", NOW_MS)
    with pytest.raises(SaslError):
        server.evaluate_response(b"c=biws,r=wrongnonce,p=AAAA", NOW_MS)
    with pytest.raises(SaslError):  # a failed exchange stays failed
        server.evaluate_response(b"c=biws,r=abc,p=AAAA", NOW_MS)


# -- OAUTHBEARER ---------------------------------------------------------------------------


def _b64(obj: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def _unsecured(claims: dict[str, object]) -> str:
    return f"{_b64({'alg': 'none'})}.{_b64(claims)}."


def _response(token: str, authzid: str = "", extensions: str = "") -> bytes:
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    return f"{gs2}\x01auth=Bearer {token}\x01{extensions}\x01".encode()


def _claims(**overrides: object) -> dict[str, object]:
    claims: dict[str, object] = {
        "sub": "alice",
        "iat": NOW_MS // 1000 - 10,
        "exp": NOW_MS // 1000 + 3600,
    }
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}


def test_oauthbearer_unsecured_token_logs_in_with_its_expiry() -> None:
    server = OAuthBearerServer(UnsecuredJwsValidator())
    assert (
        server.evaluate_response(
            _response(_unsecured(_claims()), extensions="traceId=1\x01"), NOW_MS
        )
        == b""
    )
    assert server.is_complete and server.authorization_id == "alice"
    assert server.credential_expiry_ms == (NOW_MS // 1000 + 3600) * 1000


@pytest.mark.parametrize(
    ("claims", "status"),
    [
        (_claims(exp=NOW_MS // 1000 - 1), "invalid_token"),
        (_claims(exp=None), "invalid_token"),
        (_claims(sub=None), "invalid_token"),
        (_claims(iat=NOW_MS // 1000 + 60), "invalid_token"),
        (_claims(exp="soon"), "invalid_token"),
        (_claims(scope="read"), "insufficient_scope"),
    ],
)
def test_oauthbearer_invalid_token_gets_rfc7628_error_then_fails(
    claims: dict[str, object], status: str
) -> None:
    module = parse_login_module(
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredValidatorRequiredScope="read,write";'
    )
    server = OAuthBearerServer(UnsecuredJwsValidator.from_login_module(module))
    good = OAuthBearerServer(UnsecuredJwsValidator.from_login_module(module))
    good.evaluate_response(_response(_unsecured(_claims(scope="read write"))), NOW_MS)
    assert good.is_complete
    challenge = json.loads(server.evaluate_response(_response(_unsecured(claims)), NOW_MS))
    assert challenge["status"] == status
    with pytest.raises(SaslAuthenticationFailedError, match=status):
        server.evaluate_response(b"\x01", NOW_MS)
    assert not server.is_complete


def test_oauthbearer_authzid_must_match_and_garbage_fails() -> None:
    token = _unsecured(_claims())
    server = OAuthBearerServer(UnsecuredJwsValidator())
    server.evaluate_response(_response(token, authzid="alice"), NOW_MS)
    assert server.authorization_id == "alice"
    with pytest.raises(SaslAuthenticationFailedError, match="different from the token's principal"):
        OAuthBearerServer(UnsecuredJwsValidator()).evaluate_response(
            _response(token, authzid="bob"), NOW_MS
        )
    for garbage in (
        b"",
        b"\x01",
        b"n,,auth=Bearer x",
        _response(token)[:-1],
        b"n,,\x01auth=Basic abc\x01\x01",
    ):
        with pytest.raises(SaslError):
            OAuthBearerServer(UnsecuredJwsValidator()).evaluate_response(garbage, NOW_MS)


@pytest.fixture(scope="module")
def jwks(tmp_path_factory: pytest.TempPathFactory) -> tuple[rsa.RSAPrivateKey, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    public.update(kid="k1", use="sig", alg="RS256")
    path = Path(tmp_path_factory.mktemp("jwks")) / "jwks.json"
    path.write_text(json.dumps({"keys": [public]}))
    return key, path.as_uri()


def _signed(key: rsa.RSAPrivateKey, kid: str = "k1", **claims: object) -> str:
    body = _claims(**{"aud": "kafka", "iss": "https://issuer.example", **claims})
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": kid})


def test_oauthbearer_signed_jwt_checked_against_a_jwks_file(
    jwks: tuple[rsa.RSAPrivateKey, str],
) -> None:
    key, url = jwks
    validator = JwksValidator(
        lambda: load_jwks(url),
        expected_audience=["kafka"],
        expected_issuer="https://issuer.example",
    )
    server = OAuthBearerServer(validator)
    assert server.evaluate_response(_response(_signed(key)), NOW_MS) == b""
    assert server.authorization_id == "alice"
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    refused = [
        _signed(other_key),  # wrong key
        _signed(key, kid="unknown"),
        _signed(key, aud="other"),
        _signed(key, iss="https://evil.example"),
        _signed(key, exp=NOW_MS // 1000 - 3600),
        _unsecured(_claims()),  # alg none is never accepted here
    ]
    for token in refused:
        server = OAuthBearerServer(validator)
        assert (
            json.loads(server.evaluate_response(_response(token), NOW_MS))["status"]
            == "invalid_token"
        )


def test_load_jwks_names_the_problem(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="file:, http: or https:"):
        load_jwks("/etc/jwks.json")
    with pytest.raises(ValueError, match="cannot load the JWKS"):
        load_jwks((tmp_path / "missing.json").as_uri())


# -- the listener's set --------------------------------------------------------------------


def test_mechanisms_checked_at_construction() -> None:
    with pytest.raises(ValueError, match="sasl.enabled.mechanisms is empty"):
        SaslMechanisms(())
    with pytest.raises(ValueError, match="'GSSAPI'.*does not support"):
        SaslMechanisms(("GSSAPI",))
    with pytest.raises(ValueError, match="plain.sasl.jaas.config"):
        SaslMechanisms(("PLAIN",))
    mechanisms = SaslMechanisms(
        ("PLAIN", "SCRAM-SHA-512"), plain_users=USERS, credentials=InMemoryCredentialStore()
    )
    assert mechanisms.create("PLAIN").mechanism_name == "PLAIN"
    assert mechanisms.create("SCRAM-SHA-512").mechanism_name == "SCRAM-SHA-512"
    assert "alice-pw" not in repr(mechanisms)
