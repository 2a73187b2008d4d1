"""`--add-scram` / `sparklog.add.scram`: Kafka's syntax, clear refusals that never echo a
secret, and only missing credentials written."""

from __future__ import annotations

import base64

import pytest
import scramp

from sparklog.metadata.image import MetadataImage
from sparklog.metadata.scram import salted_password
from sparklog.metadata.scram_bootstrap import (
    bootstrap_credentials,
    missing_credential_records,
    parse_add_scram,
    parse_entries,
)
from sparklog.security.credentials import ScramMechanism
from sparklog.settings import ConfigError


def logs_in(credential, mechanism: str, user: str, password: str) -> bool:
    def auth(_user):
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    server = scramp.ScramMechanism(mechanism).make_server(auth)
    client = scramp.ScramClient([mechanism], user, password)
    try:
        server.set_client_first(client.get_client_first())
        client.set_server_first(server.get_server_first())
        server.set_client_final(client.get_client_final())
        client.set_server_final(server.get_server_final())
    except scramp.ScramException:
        return False
    return True


def test_kafka_storage_syntax_with_a_password_or_a_salted_password():
    salt = b"fixed-salt-16byt"  # scramp refuses salts under 12 bytes
    salted = salted_password(ScramMechanism.SCRAM_SHA_512, "bob-secret", salt, 8192)
    b64 = base64.b64encode
    entries = parse_add_scram(
        "SCRAM-SHA-256=[name=alice,password=alice-secret];"
        f'SCRAM-SHA-512=[name=bob,iterations=8192,salt="{b64(salt).decode()}",'
        f'saltedpassword="{b64(salted).decode()}"]'
    )
    assert [(e.user, e.mechanism, e.credential.iterations) for e in entries] == [
        ("alice", ScramMechanism.SCRAM_SHA_256, 4096),
        ("bob", ScramMechanism.SCRAM_SHA_512, 8192),
    ]
    assert logs_in(entries[0].credential, "SCRAM-SHA-256", "alice", "alice-secret")
    assert not logs_in(entries[0].credential, "SCRAM-SHA-256", "alice", "wrong")
    assert logs_in(entries[1].credential, "SCRAM-SHA-512", "bob", "bob-secret")
    assert "secret" not in repr(entries)
    # several CLI arguments, and a password holding the separators in quotes
    (quoted,) = parse_entries(['SCRAM-SHA-256=[name=carol,password="a,b;c"]'])
    assert logs_in(quoted.credential, "SCRAM-SHA-256", "carol", "a,b;c")


@pytest.mark.parametrize(
    "text, message",
    [
        ("SCRAM-SHA-1=[name=a,password=hunter2]", "not a SCRAM mechanism"),
        ("SCRAM-SHA-256=[password=hunter2]", "no name"),
        ("SCRAM-SHA-256=[name=a]", "exactly one of password"),
        ("SCRAM-SHA-256=[name=a,password=hunter2,iterations=100]", "outside 4096-16384"),
        ("SCRAM-SHA-256=[name=a,saltedpassword=aGk=]", "needs the salt"),
        ("SCRAM-SHA-256=[name=a,pasword=hunter2]", "unknown field 'pasword'"),
        ("SCRAM-SHA-256=[name=a,password=hunter2,salt=%%]", "salt is not base64"),
        ("name=a,password=hunter2", "cannot read entry 1"),
        ("SCRAM-SHA-256=[name=a,password=x];SCRAM-SHA-256=[name=a,password=hunter2]", "two"),
    ],
)
def test_mistakes_are_named_without_the_password(text, message):
    with pytest.raises(ConfigError, match=message) as refused:
        parse_add_scram(text)
    assert "hunter2" not in str(refused.value)


def test_only_credentials_the_log_lacks_are_written():
    image = MetadataImage()
    props = {"sparklog.add.scram": "SCRAM-SHA-256=[name=alice,password=first]"}
    first = missing_credential_records(bootstrap_credentials(props), image.credentials)
    assert len(first) == 1
    image.apply(first[0])
    # a restart with the same (or a changed) setting keeps what the log has
    again = {"sparklog.add.scram": "SCRAM-SHA-256=[name=alice,password=second]"}
    assert missing_credential_records(bootstrap_credentials(again), image.credentials) == []
    stored = image.credentials.scram_credential(ScramMechanism.SCRAM_SHA_256, "alice")
    assert logs_in(stored, "SCRAM-SHA-256", "alice", "first")
    assert bootstrap_credentials({}) == []


def test_brokers_never_get_the_first_users_passwords():
    from sparklog.storage.object_store import without_storage_options

    settings = {"sparklog.add.scram": "SCRAM-SHA-256=[name=a,password=p]", "num.partitions": "3"}
    assert without_storage_options(settings) == {"num.partitions": "3"}
