"""ApiVersions' feature fields (KIP-584): what `kafka-features.sh describe` reads."""

from __future__ import annotations

from sparklog.metadata.image import ELR_FEATURE, SUPPORTED_FEATURES, TRANSACTION_VERSION_FEATURE
from sparklog.protocol import codec
from sparklog.protocol.api_versions import BROKER_APIS, CONTROLLER_APIS, ApiKey
from sparklog.protocol.async_client import FeatureLevels, api_versions_response

FEATURES = FeatureLevels(SUPPORTED_FEATURES, {ELR_FEATURE: 1, "unused.version": 0}, 41)


def roundtrip(version: int):
    """The response as a client decodes it (tagged fields included)."""
    response = api_versions_response(BROKER_APIS, version, features=FEATURES)
    frame = codec.encode_response(response, correlation_id=7)
    _correlation_id, body = codec.decode_response(frame[4:], ApiKey.API_VERSIONS, version)
    return body


def test_v4_announces_supported_and_finalized_levels():
    decoded = roundtrip(4)
    assert [(f.name, f.min_version, f.max_version) for f in decoded.supported_features] == [
        (ELR_FEATURE, 0, 1),
        (TRANSACTION_VERSION_FEATURE, 0, 2),  # Kafka 4.x's transactions v2 (KIP-890 part 2)
    ]
    assert [(f.name, f.max_version_level) for f in decoded.finalized_features] == [(ELR_FEATURE, 1)]
    assert decoded.finalized_features_epoch == 41


def test_v3_omits_ranges_starting_at_zero_but_keeps_the_finalized_levels():
    decoded = roundtrip(3)
    assert decoded.supported_features == ()
    assert [(f.name, f.max_version_level) for f in decoded.finalized_features] == [(ELR_FEATURE, 1)]


def test_brokers_and_the_controller_serve_api_versions_v4_and_describe_quorum():
    for apis in (BROKER_APIS, CONTROLLER_APIS):
        assert apis[ApiKey.API_VERSIONS] == (0, 4)
        assert apis[ApiKey.DESCRIBE_QUORUM] == (0, 2)
