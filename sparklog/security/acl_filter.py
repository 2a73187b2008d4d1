"""ACL binding filters: what DescribeAcls and DeleteAcls select bindings with (Kafka's
`AclBindingFilter`, `ResourcePatternFilter`, `AccessControlEntryFilter`).

A filter field of ANY (or a null name, principal or host) matches everything. A resource
filter's pattern type MATCH selects every stored pattern that would match a resource of that
name: the LITERAL pattern of the name, the LITERAL wildcard `*`, and every PREFIXED pattern the
name starts with (`ResourcePatternFilter.matches`). A filter with an UNKNOWN field (a code
this side does not know) matches nothing; DeleteAcls refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparklog.security.acl import (
    WILDCARD_RESOURCE,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A DescribeAcls / DeleteAcls filter: None for a name, principal or host matches any."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def indefinite_field(self) -> str | None:
        """Why DeleteAcls refuses this filter (an UNKNOWN field), or None; Kafka's messages
        (`AclControlManager.validateFilter`). DescribeAcls does not refuse one: it matches
        nothing."""
        if self.resource_type is ResourceType.UNKNOWN or self.pattern_type is PatternType.UNKNOWN:
            return "Unknown patternFilter."
        if self.operation is AclOperation.UNKNOWN or (
            self.permission_type is AclPermissionType.UNKNOWN
        ):
            return "Unknown entryFilter."
        return None

    def matches(self, binding: AclBinding) -> bool:
        return self._matches_pattern(binding) and self._matches_entry(binding)

    def _matches_pattern(self, binding: AclBinding) -> bool:
        pattern = binding.pattern
        if (
            self.resource_type is not ResourceType.ANY
            and self.resource_type != pattern.resource_type
        ):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and (
            self.pattern_type != pattern.pattern_type
        ):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH: the stored patterns that would apply to a resource called `name`
        if pattern.pattern_type is PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type is PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return False

    def _matches_entry(self, binding: AclBinding) -> bool:
        entry = binding.entry
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation != entry.operation:
            return False
        return self.permission_type in (AclPermissionType.ANY, entry.permission_type)


#: The filter matching every binding.
ANY_BINDING = AclBindingFilter()
