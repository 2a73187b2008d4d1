"""A server's listeners, parsed and validated as Kafka's `KafkaConfig` does (`listeners`,
`effectiveAdvertisedBrokerListeners`, `interBrokerListenerNameAndSecurityProtocol`,
`effectiveListenerSecurityProtocolMap`, `validateValues`): the vocabulary (endpoints, the
per-listener settings and security) is `sparklog.security.listeners`; this module puts one
server's properties together and refuses, with Kafka's message, what Kafka refuses.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparklog.security.listeners import (
    ADVERTISED_LISTENERS,
    CONTROLLER_LISTENER_NAMES,
    DEFAULT_LISTENERS,
    DEFAULT_PROTOCOL_MAP,
    ENDPOINT_PATTERN,
    INTER_BROKER_LISTENER_NAME,
    INTER_BROKER_PROTOCOL,
    LISTENER_SETTINGS,
    LISTENERS,
    PROTOCOL_MAP,
    ListenerEndpoint,
    ListenerSecurity,
    ListenerSettings,
    listener_security,
    normalised,
    parse_listener_list,
    parse_protocol_map,
    security_protocol,
    split_list,
)
from sparklog.security.session import SecurityProtocol
from sparklog.settings import ConfigError


@dataclass(frozen=True, slots=True, repr=False)
class ListenerConfig:
    """A server's listeners, parsed and validated (module doc). Endpoints keep the configured
    ports (0: any free one); `advertised` holds what is registered, `listeners` when
    `advertised.listeners` is unset, controller listeners left out of both broker lists."""

    #: every entry of `listeners`, in order
    listeners: tuple[ListenerEndpoint, ...]
    #: the broker endpoints to advertise (`advertised.listeners`, else the broker listeners)
    advertised: tuple[ListenerEndpoint, ...]
    protocol_map: Mapping[str, SecurityProtocol]
    inter_broker_listener_name: str
    controller_listener_names: tuple[str, ...]
    properties: Mapping[str, str]

    def __repr__(self) -> str:
        return (
            f"ListenerConfig(listeners={','.join(map(str, self.listeners))}, "
            f"inter_broker={self.inter_broker_listener_name})"
        )

    @classmethod
    def from_properties(cls, props: Mapping[str, object] | None = None) -> ListenerConfig:
        """Parse and validate (module doc); ConfigError with Kafka's message otherwise."""
        given = {str(k): str(v) for k, v in (props or {}).items() if v is not None}
        listeners_value = given.get(LISTENERS, DEFAULT_LISTENERS)
        controller_names = tuple(
            normalised(n) for n in split_list(given.get(CONTROLLER_LISTENER_NAMES))
        )
        protocol_map = _effective_protocol_map(given, controller_names)
        listeners = parse_listener_list(listeners_value, protocol_map)
        broker_listeners = tuple(e for e in listeners if e.listener_name not in controller_names)
        advertised_value = given.get(ADVERTISED_LISTENERS)
        if advertised_value is None or not advertised_value.strip():
            advertised = broker_listeners
        else:
            advertised = tuple(
                e
                for e in parse_listener_list(
                    advertised_value, protocol_map, require_distinct_ports=False
                )
                if e.listener_name not in controller_names
            )
        inter_broker = _inter_broker_listener_name(given, protocol_map)
        config = cls(
            listeners=listeners,
            advertised=advertised,
            protocol_map=dict(protocol_map),
            inter_broker_listener_name=inter_broker,
            controller_listener_names=controller_names,
            properties=given,
        )
        config._validate()
        return config

    def _validate(self) -> None:
        advertised_names = [e.listener_name for e in self.advertised]
        if not advertised_names:
            raise ConfigError(
                "There must be at least one broker advertised listener. Perhaps all "
                f"listeners appear in {CONTROLLER_LISTENER_NAMES}?"
            )
        if self.inter_broker_listener_name not in advertised_names:
            raise ConfigError(
                f"{INTER_BROKER_LISTENER_NAME} must be a listener name defined in "
                f"{ADVERTISED_LISTENERS}. The valid options based on currently configured "
                f"listeners are {','.join(advertised_names)}"
            )
        names = [e.listener_name for e in self.listeners]
        if not set(advertised_names) <= set(names):
            raise ConfigError(
                f"{ADVERTISED_LISTENERS} listener names must be equal to or a subset of the "
                f"ones defined in {LISTENERS}. Found {','.join(advertised_names)}. The valid "
                f"options based on the current configuration are {','.join(names)}"
            )
        if any(e.host == "0.0.0.0" for e in self.advertised):
            raise ConfigError(
                f"{ADVERTISED_LISTENERS} cannot use the nonroutable meta-address 0.0.0.0. "
                "Use a routable IP address."
            )

    # -- what each server binds and advertises ----------------------------------------------

    @property
    def broker_listeners(self) -> tuple[ListenerEndpoint, ...]:
        """The listeners a broker binds (Kafka's `dataPlaneListeners`), in order."""
        return tuple(
            e for e in self.listeners if e.listener_name not in self.controller_listener_names
        )

    @property
    def inter_broker_protocol(self) -> SecurityProtocol:
        return self.protocol_map[self.inter_broker_listener_name]

    @property
    def controller_listener_name(self) -> str:
        """The listener brokers reach the controller on (the first controller listener, as
        Kafka's brokers use; else the inter-broker one)."""
        names = self.controller_listener_names
        return names[0] if names else self.inter_broker_listener_name

    @property
    def controller_protocol(self) -> SecurityProtocol:
        return self.protocol_map[self.controller_listener_name]

    def advertised_for(self, listener_name: str) -> ListenerEndpoint | None:
        name = normalised(listener_name)
        return next((e for e in self.advertised if e.listener_name == name), None)

    def controller_listener(self, host: str = "", port: int = 0) -> ListenerEndpoint:
        """The driver controller's listener: the first of `controller.listener.names`, else
        one named and secured like the inter-broker listener. Its `listeners` entry, when
        there is one, gives the address; the launcher's `port` (when not 0: a restart binding
        its port again) and `host` (when the entry names none) fill in the rest."""
        if not self.controller_listener_names:
            return self.coordinator_listener(host, port)
        name = self.controller_listener_names[0]
        listed = next((e for e in self.listeners if e.listener_name == name), None)
        if listed is None:
            return ListenerEndpoint(name, self.protocol_map[name], host, port)
        return listed.with_address(listed.host or host, port or listed.port)

    def coordinator_listener(self, host: str = "", port: int = 0) -> ListenerEndpoint:
        """The driver coordinator's listener: named and secured like the inter-broker one."""
        name = self.inter_broker_listener_name
        return ListenerEndpoint(name, self.protocol_map[name], host, port)

    def formatted(self) -> dict[str, str]:
        """The listener settings by name as given, else their defaults (what DescribeConfigs
        lists; the per-listener `listener.name.*` family is not listed)."""
        return {
            name: str(self.properties.get(name, setting.default_text))
            for name, setting in LISTENER_SETTINGS.items()
            if not setting.prefix
        }

    def settings(self, listener_name: str) -> ListenerSettings:
        return ListenerSettings(normalised(listener_name), self.properties)

    def security(self, endpoint: ListenerEndpoint) -> ListenerSecurity:
        """`endpoint`'s `ListenerSecurity` (raises ConfigError when it cannot be served)."""
        return listener_security(endpoint, self.settings(endpoint.listener_name))


def _effective_protocol_map(
    given: Mapping[str, str], controller_names: tuple[str, ...]
) -> dict[str, SecurityProtocol]:
    """The map, plus controller listeners as PLAINTEXT when the map was not given and nothing
    but PLAINTEXT is in use (Kafka's `effectiveListenerSecurityProtocolMap` under KRaft)."""
    explicit = PROTOCOL_MAP in given
    protocol_map = parse_protocol_map(given.get(PROTOCOL_MAP, DEFAULT_PROTOCOL_MAP))
    missing = [n for n in controller_names if n not in protocol_map]
    if not missing:
        return protocol_map
    in_use = {
        protocol_map.get(normalised(m.group(1)))
        for entry in split_list(given.get(LISTENERS, DEFAULT_LISTENERS))
        if (m := ENDPOINT_PATTERN.match(entry)) and normalised(m.group(1)) not in controller_names
    }
    if explicit or in_use - {SecurityProtocol.PLAINTEXT}:
        raise ConfigError(
            f"Controller listener with name {missing[0]} defined in {CONTROLLER_LISTENER_NAMES} "
            f"not found in {PROTOCOL_MAP} (an explicit security mapping for each controller "
            f"listener is required if {PROTOCOL_MAP} is non-empty, or if there are security "
            "protocols other than PLAINTEXT in use)"
        )
    return protocol_map | {n: SecurityProtocol.PLAINTEXT for n in missing}


def _inter_broker_listener_name(
    given: Mapping[str, str], protocol_map: Mapping[str, SecurityProtocol]
) -> str:
    """Kafka's `interBrokerListenerNameAndSecurityProtocol`: the name if given (it must be in
    the map), else the listener named after `security.inter.broker.protocol`."""
    name = (given.get(INTER_BROKER_LISTENER_NAME) or "").strip()
    if name:
        if (given.get(INTER_BROKER_PROTOCOL) or "").strip():
            raise ConfigError(
                f"Only one of {INTER_BROKER_LISTENER_NAME} and {INTER_BROKER_PROTOCOL} "
                "should be set."
            )
        listener = normalised(name)
        if listener not in protocol_map:
            raise ConfigError(
                f"Listener with name {listener} defined in {INTER_BROKER_LISTENER_NAME} not "
                f"found in {PROTOCOL_MAP}."
            )
        return listener
    protocol = (given.get(INTER_BROKER_PROTOCOL) or "").strip() or SecurityProtocol.PLAINTEXT.name
    return security_protocol(protocol, INTER_BROKER_PROTOCOL).name
