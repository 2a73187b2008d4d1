"""Kafka's security model (DESIGN D16), on the shared floor under broker, controller and
coordinator: what every server and client imports to know *who* is asking and *what* they may do.

What lives here:

- `session`: the `Session` each request carries (listener, security protocol, principal,
  client id and address) and `KafkaPrincipal` (`User:ANONYMOUS` until authentication exists).
- `acl`: the ACL vocabulary (`AclOperation`, `ResourceType` with Kafka's codes) and the
  operations each resource type supports (Kafka's `AclEntry.supportedOperations`), which is
  what a server without an authorizer answers as a resource's authorized operations.

What the security issue adds here (sans-IO, like the rest of the floor): TLS contexts from
Kafka's `ssl.*` settings, the SASL mechanisms (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER) as state
machines the connection drives while it is pre-authentication, the principal builder
(`principal.builder.class`, `ssl.principal.mapping.rules`, `sasl.kerberos.principal.to.local.rules`)
and the StandardAuthorizer's ACL matching. The request pipeline
(`sparklog.protocol.pipeline`) is where they plug in; the outbound-connection factory
(`sparklog.protocol.outbound`) is where client-side TLS and SASL settings go.
"""
