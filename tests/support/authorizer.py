"""The settings that turn on the StandardAuthorizer with every plaintext client allowed.

Kafka (and sparklog) answer CreateAcls / DescribeAcls / DeleteAcls with SECURITY_DISABLED
without `authorizer.class.name`; tests of the ACL APIs themselves (not of enforcement) use
this: `User:ANONYMOUS` (every PLAINTEXT client and the servers' own connections) is a super
user, and resources without ACLs stay open to any other principal.
"""

from __future__ import annotations

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

OPEN_AUTHORIZER = {
    "authorizer.class.name": STANDARD_AUTHORIZER,
    "super.users": "User:ANONYMOUS",
    "allow.everyone.if.no.acl.found": "true",
}
