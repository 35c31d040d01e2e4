"""An optional SASL listener with users and ACLs for ``app.brokers.apache_kafka.KafkaBroker``.

``SaslListener`` describes it: SASL_PLAINTEXT, or SASL_SSL with ``keystore`` (a PEM file
holding the broker's unencrypted PKCS#8 private key, then its certificate chain); users with
passwords, known to the broker for SASL PLAIN (in the listener's JAAS configuration) and
SCRAM-SHA-256 (credentials written into the metadata log when the storage is formatted,
``kafka-storage format --add-scram``). With ``authorize`` set, the
broker runs KRaft's ``StandardAuthorizer``: the PLAINTEXT and controller listeners stay
unauthenticated and their principal ``User:ANONYMOUS`` is the only super user, every SASL user
needs ACLs, which ``grant_prefix`` creates through the PLAINTEXT listener (CreateAcls; aiokafka's
admin client has no call for it, so the request goes through its client directly).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.admin import CreateAclsRequest

SUPER_USER = "User:ANONYMOUS"
"""The principal of the unauthenticated PLAINTEXT and controller listeners: a super user."""

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256")

# Kafka's ACL enums (org.apache.kafka.common.resource / acl), as sent in CreateAcls.
RESOURCE_TOPIC, RESOURCE_GROUP = 2, 3
PATTERN_LITERAL, PATTERN_PREFIXED = 3, 4
OPERATION_ALL = 2
PERMISSION_ALLOW = 3


class AclError(RuntimeError):
    """The broker refused to create an ACL; ``str(exc)`` says which and why."""


@dataclass(frozen=True)
class SaslListener:
    """A SASL listener on ``port`` (a free one when 0) for ``users`` (name -> password) over
    PLAIN and SCRAM-SHA-256, with TLS when ``keystore`` is given; ``authorize`` turns ACLs on
    (module docstring)."""

    users: Mapping[str, str] = field(default_factory=dict)
    authorize: bool = False
    port: int = 0
    keystore: Path | None = None

    @property
    def protocol(self) -> str:
        """The listener's security protocol, also its listener name."""
        return "SASL_SSL" if self.keystore is not None else "SASL_PLAINTEXT"

    def server_config(self) -> dict[str, str]:
        """Broker properties of the listener beyond its address: mechanisms, the PLAIN users'
        JAAS entry, SCRAM's login module, the PEM keystore with TLS and, with ``authorize``,
        the authorizer."""
        plain_users = "".join(f' user_{name}="{pw}"' for name, pw in self.users.items())
        prefix = f"listener.name.{self.protocol.lower()}"
        config = {
            f"{prefix}.sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
            f"{prefix}.plain.sasl.jaas.config": (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required{plain_users};"
            ),
            f"{prefix}.scram-sha-256.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
        }
        if self.keystore is not None:
            config[f"{prefix}.ssl.keystore.type"] = "PEM"
            config[f"{prefix}.ssl.keystore.location"] = str(self.keystore)
        if self.authorize:
            config["authorizer.class.name"] = (
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            )
            config["super.users"] = SUPER_USER
        return config

    def format_arguments(self) -> list[str]:
        """``StorageTool format`` arguments adding the users' SCRAM-SHA-256 credentials."""
        arguments = []
        for name, password in self.users.items():
            arguments += ["--add-scram", f"SCRAM-SHA-256=[name={name},password={password}]"]
        return arguments


async def grant_prefix(bootstrap: str, user: str, topic_prefix: str) -> None:
    """Allow ``user`` every operation on the topics named ``topic_prefix...`` and on every
    consumer group, through the super user's PLAINTEXT listener ``bootstrap``; ``AclError``
    when the broker refuses. One CreateAcls request per ACL."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        node = client.get_random_node()
        grants = (
            (RESOURCE_TOPIC, topic_prefix, PATTERN_PREFIXED),
            (RESOURCE_GROUP, "*", PATTERN_LITERAL),
        )
        for resource, name, pattern in grants:
            request = CreateAclsRequest(
                resource, name, pattern, f"User:{user}", "*", OPERATION_ALL, PERMISSION_ALLOW
            )
            response = await client.send(node, request)
            for error_code, message in response.creation_responses:
                if error_code:
                    raise AclError(f"ACL on {name!r} for {user!r}: error {error_code} {message}")
    finally:
        await client.close()
