"""OAUTHBEARER tokens from a real HTTP token endpoint (a local `http.server` speaking the
OAuth 2 client-credentials grant) and from a token file."""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest

from sparklog.client.config import producer_config
from sparklog.client.oauth import token_endpoint_provider
from sparklog.client.security import client_security
from sparklog.errors import SaslAuthenticationFailedError
from sparklog.security.sasl.client import SaslConfigError, unsecured_jws

CLIENT_ID, CLIENT_SECRET = "etl-job", "s3cret-client"


@pytest.fixture
def token_server():
    """An OAuth token endpoint: client credentials for CLIENT_ID/CLIENT_SECRET get a token
    living 60 s; anything else gets 401 invalid_client. Records the requests it served."""
    served: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            form = parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
            user, _, secret = (
                base64.b64decode(self.headers["Authorization"].removeprefix("Basic "))
                .decode()
                .partition(":")
            )
            served.append({"form": form, "user": user})
            if (user, secret) != (CLIENT_ID, CLIENT_SECRET):
                body = {"error": "invalid_client", "error_description": "bad credentials"}
                self.send_response(401)
            else:
                claims = {
                    "unsecuredLoginStringClaim_sub": user,
                    "unsecuredLoginLifetimeSeconds": "60",
                }
                body = {"access_token": unsecured_jws(claims, int(time.time() * 1000))}
                self.send_response(200)
            data = json.dumps(body).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/token", served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _jaas(secret: str) -> str:
    return (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        f'clientId="{CLIENT_ID}" clientSecret="{secret}" scope="kafka read";'
    )


def test_client_credentials_grant_and_token_reuse(token_server):
    url, served = token_server
    config = producer_config(
        {
            "bootstrap.servers": "127.0.0.1:9092",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.jaas.config": _jaas(CLIENT_SECRET),
            "sasl.oauthbearer.token.endpoint.url": url,
        }
    )
    sasl = client_security(config).sasl
    assert sasl is not None
    first = sasl.new_mechanism(0).initial_response()
    second = sasl.new_mechanism(0).initial_response()
    assert first == second and b"auth=Bearer " in first
    assert len(served) == 1  # one fetch per token lifetime, not per connection
    assert served[0]["form"] == {"grant_type": ["client_credentials"], "scope": ["kafka read"]}
    assert served[0]["user"] == CLIENT_ID


def test_refused_credentials_name_the_endpoints_error_not_the_secret(token_server):
    url, _served = token_server
    provider = token_endpoint_provider(url, {"clientId": CLIENT_ID, "clientSecret": "wrong-xyz"})
    with pytest.raises(SaslAuthenticationFailedError, match="HTTP 401: invalid_client - bad") as e:
        provider()
    assert "wrong-xyz" not in str(e.value)


def test_token_file_and_bad_urls(tmp_path):
    token_file = tmp_path / "token.jwt"
    token_file.write_text("h.p.s\n")
    assert token_endpoint_provider(token_file.as_uri(), {})() == "h.p.s"
    with pytest.raises(SaslConfigError, match="needs clientId and clientSecret"):
        token_endpoint_provider("https://idp.example/token", {"clientId": "x"})
    with pytest.raises(SaslConfigError, match="http\\(s\\) or file URL"):
        token_endpoint_provider("ftp://idp.example/token", {})
    with pytest.raises(SaslAuthenticationFailedError, match="empty"):
        (tmp_path / "empty").write_text("")
        token_endpoint_provider((tmp_path / "empty").as_uri(), {})()
