"""The authorizer's settings (Kafka's `authorizer.class.name`, `super.users`,
`allow.everyone.if.no.acl.found`), read alike by brokers, the controller and the coordinator.

Declared once, in the broker scope (a server setting belongs to one component), and parsed
from the same properties every server is given: a cluster whose servers share one config turns
authorization on everywhere at once, as a Kafka cluster sharing `server.properties` does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.security.standard_authorizer import (
    StandardAuthorizer,
    check_authorizer_class,
    parse_super_users,
)
from sparklog.settings import Check, ConfigType, Importance, Scope, Setting, define


def _ok(check: Callable[[str], object]) -> Callable[[Any], bool]:
    def ok(value: Any) -> bool:
        try:
            check(str(value))
        except ValueError:
            return False
        return True

    return ok


_CLASS_RULE = Check(
    _ok(check_authorizer_class),
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer (or StandardAuthorizer), or empty "
    "for no authorizer (ZooKeeper's AclAuthorizer was removed in Kafka 4.0)",
)
_SUPER_USERS_RULE = Check(
    _ok(parse_super_users), "principals as type:name separated by ';' (User:admin;User:broker)"
)


AUTHORIZER_SETTINGS = define(
    Setting(
        "authorizer.class.name",
        ConfigType.STRING,
        None,
        doc="the authorizer: org.apache.kafka.metadata.authorizer.StandardAuthorizer "
        "(ACLs from the metadata log) or empty for none (everything allowed)",
        importance=Importance.LOW,
        scope=Scope.BROKER,
        group="authorizer",
        validator=_CLASS_RULE,
    ),
    Setting(
        "super.users",
        ConfigType.STRING,
        None,
        doc="principals allowed everything, ACLs unread: User:admin;User:broker",
        importance=Importance.MEDIUM,
        scope=Scope.BROKER,
        group="authorizer",
        validator=_SUPER_USERS_RULE,
    ),
    Setting(
        "allow.everyone.if.no.acl.found",
        ConfigType.BOOLEAN,
        False,
        doc="with an authorizer, allow an action on a resource no ACL applies to",
        importance=Importance.MEDIUM,
        scope=Scope.BROKER,
        group="authorizer",
    ),
)


@dataclass(frozen=True, slots=True)
class AuthorizerConfig:
    authorizer_class_name: str | None = None
    super_users: str | None = None
    allow_everyone_if_no_acl_found: bool = False

    @classmethod
    def from_properties(cls, props: Mapping[str, object] | None) -> AuthorizerConfig:
        """The authorizer settings of `props` (other names ignored); ConfigError (a
        ValueError) naming a bad value."""
        return cls(**AUTHORIZER_SETTINGS.parse(props or {}, unknown="ignore"))

    @property
    def enabled(self) -> bool:
        return check_authorizer_class(self.authorizer_class_name)

    def build(self) -> StandardAuthorizer | None:
        """The configured authorizer (empty of ACLs: the server feeds it), None without one."""
        if not self.enabled:
            return None
        return StandardAuthorizer(
            super_users=self.super_users,
            allow_everyone_if_no_acl_found=self.allow_everyone_if_no_acl_found,
        )
