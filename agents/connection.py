"""One Kafka connection config, and every client's options rendered from it.

``KafkaConnection`` holds the bootstrap servers and the security settings; it is built from the
worker's settings (``from_settings``) or from Spark source options (``from_options``), and
renders the options of aiokafka (``aiokafka_options``), Faust (``faust_broker``,
``faust_credentials``), the Spark data source (``source_options``) and Spark's JVM Kafka
connector (``connector_options``: a JAAS config, PEM stores). A new setting is one field here
(with its source option name), its line in ``from_settings`` and its rendering in each method
(plus the worker setting in ``app.settings``); tests/test_kafka_connection.py checks that every
field is read and reaches every rendering. Reference: docs/reference/configuration.md.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # Faust is heavy to import; only the worker's app needs it
    import faust

    from agents.config import WorkerSettings


def _setting(option: str, *, secret: bool = False) -> Any:
    """A field defaulting to ``None`` whose Spark source option is ``option`` (a secret one is
    left out of the connection's ``repr``)."""
    return field(default=None, repr=not secret, metadata={"option": option})


@dataclass(frozen=True, slots=True)
class KafkaConnection:
    """Where the brokers are and how to authenticate (semantics: ``app.settings``)."""

    bootstrap_servers: tuple[str, ...] = field(
        default=(), metadata={"option": "kafka.bootstrap.servers"}
    )
    security_protocol: str | None = _setting("kafka.security.protocol")
    sasl_mechanism: str | None = _setting("kafka.sasl.mechanism")
    sasl_username: str | None = _setting("kafka.sasl.username")
    sasl_password: str | None = _setting("kafka.sasl.password", secret=True)
    ssl_cafile: str | None = _setting("kafka.ssl.cafile")
    ssl_certfile: str | None = _setting("kafka.ssl.certfile")
    ssl_keyfile: str | None = _setting("kafka.ssl.keyfile")

    @classmethod
    def from_settings(cls, settings: WorkerSettings) -> KafkaConnection:
        """The connection of a worker's settings (each field from the setting of its name)."""
        return cls(
            bootstrap_servers=settings.bootstrap_servers,
            security_protocol=settings.security_protocol,
            sasl_mechanism=settings.sasl_mechanism,
            sasl_username=settings.sasl_username,
            sasl_password=settings.sasl_password,
            ssl_cafile=settings.ssl_cafile,
            ssl_certfile=settings.ssl_certfile,
            ssl_keyfile=settings.ssl_keyfile,
        )

    @classmethod
    def from_options(
        cls, options: Mapping[str, str], bootstrap_servers: Sequence[str] | None = None
    ) -> KafkaConnection:
        """The connection of Spark source options (names case-insensitive); the servers are
        ``bootstrap_servers`` if given, else those of ``kafka.bootstrap.servers``."""
        lowered = {k.lower(): v for k, v in options.items()}
        values = {f.name: lowered.get(f.metadata["option"]) or None for f in fields(cls)}
        if bootstrap_servers is None:
            text = values["bootstrap_servers"] or ""
            bootstrap_servers = [s.strip().removeprefix("kafka://") for s in text.split(",")]
        values["bootstrap_servers"] = tuple(s for s in bootstrap_servers if s)
        return cls(**values)

    @property
    def uses_tls(self) -> bool:
        return (self.security_protocol or "").upper() in ("SSL", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext | None:
        """A new TLS context of the PEM files (``None`` without TLS); reads the files."""
        from aiokafka.helpers import create_ssl_context  # aiokafka only when a client is made

        if not self.uses_tls:
            return None
        return create_ssl_context(
            cafile=self.ssl_cafile, certfile=self.ssl_certfile, keyfile=self.ssl_keyfile
        )

    def aiokafka_options(self) -> dict[str, Any]:
        """Keyword arguments of every aiokafka client (consumer, producer, admin, client)."""
        options: dict[str, Any] = {"bootstrap_servers": list(self.bootstrap_servers)}
        if self.security_protocol:
            options["security_protocol"] = self.security_protocol.upper()
        if self.uses_tls:
            options["ssl_context"] = self.ssl_context()
        if self.sasl_mechanism:
            options["sasl_mechanism"] = self.sasl_mechanism
            options["sasl_plain_username"] = self.sasl_username
            options["sasl_plain_password"] = self.sasl_password
        return options

    def faust_broker(self) -> str:
        """The servers in Faust's URL form: ``kafka://h1:9092;h2:9092``."""
        return "kafka://" + ";".join(self.bootstrap_servers)

    def faust_credentials(self) -> faust.auth.Credentials | None:
        """Faust's ``broker_credentials`` (``None`` for PLAINTEXT)."""
        import faust

        protocol = (self.security_protocol or "").upper()
        if protocol in ("", "PLAINTEXT"):
            return None
        context = self.ssl_context()
        if protocol == "SSL":
            return faust.SSLCredentials(context)
        if self.sasl_mechanism == "GSSAPI":
            return faust.GSSAPICredentials(ssl_context=context)
        return faust.SASLCredentials(
            username=self.sasl_username,
            password=self.sasl_password,
            ssl_context=context,
            mechanism=self.sasl_mechanism or "PLAIN",
        )

    def source_options(self) -> dict[str, str]:
        """The Spark data source's options of the connection (its unset fields left out)."""
        out = {f.metadata["option"]: getattr(self, f.name) for f in fields(self)}
        out["kafka.bootstrap.servers"] = ",".join(self.bootstrap_servers)
        return {name: str(value) for name, value in out.items() if value}

    def connector_options(self) -> dict[str, str]:
        """Spark's Kafka connector options: servers and protocol as they are, the mechanism,
        a user name and password as ``kafka.sasl.jaas.config`` (``jaas_config``), PEM files as
        PEM text in the trust and key store options (``pem_stores``, read here)."""
        out = {"kafka.bootstrap.servers": ",".join(self.bootstrap_servers)}
        out["kafka.security.protocol"] = self.security_protocol or ""
        out["kafka.sasl.mechanism"] = self.sasl_mechanism or ""
        out = {name: value for name, value in out.items() if value}
        if self.sasl_username is not None or self.sasl_password is not None:
            mechanism = (self.sasl_mechanism or "PLAIN").upper()
            config, extra = jaas_config(
                mechanism, self.sasl_username or "", self.sasl_password or ""
            )
            out["kafka.sasl.jaas.config"] = config
            out.update(extra)
        out.update(pem_stores(self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile))
        return out


SOURCE_OPTIONS = tuple(
    f.metadata["option"] for f in fields(KafkaConnection) if f.name != "bootstrap_servers"
)
"""The Spark source options of the security fields."""

DRIVER_REFUSALS = (
    ("kafka.sasl.jaas.config", ("kafka.sasl.username", "kafka.sasl.password"),
     "kafka.sasl.mechanism with kafka.sasl.username and kafka.sasl.password"),
    ("kafka.ssl.truststore.", ("kafka.ssl.cafile",), "kafka.ssl.cafile (a PEM file)"),
    ("kafka.ssl.keystore.", ("kafka.ssl.certfile",),
     "kafka.ssl.certfile and kafka.ssl.keyfile (PEM files)"),
)  # fmt: skip
"""(connector-only option family, the bridge options it is derived from, what to give instead)."""
DERIVED_FAMILIES = tuple(family for family, _, _ in DRIVER_REFUSALS)
"""The connector's security options that ``connector_options`` derives from bridge options."""


def driver_refusal(options: Mapping[str, str]) -> str | None:
    """One line naming a connector-only security option (lower-cased names) that the bridge's
    Python client cannot use (a JAAS config, e.g. Kerberos; JKS or PKCS12 stores) and the bridge
    option to give instead; ``None`` when there is none. Options derived from bridge options
    (given too) are fine: the Python client reads those."""
    for family, sources, instead in DRIVER_REFUSALS:
        if any(options.get(name) is not None for name in sources):
            continue
        given = sorted(name for name in options if name.startswith(family))
        if given:
            return (
                f"option {given[0]} is Spark's connector's own: the bridge's Python Kafka client "
                f"(which reads the topic's offsets on the driver) cannot use it; give {instead}"
            )
    return None


LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}
"""SASL mechanism -> the JAAS login module a user name and password go to."""
OAUTH_CALLBACK_HANDLER = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
)
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.DOTALL)
_PKCS8_KEYS = ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY")


def jaas_quote(value: str) -> str:
    """``value`` as a double-quoted JAAS option value (Kafka parses it with Java's
    ``StreamTokenizer``: backslash, quote and line breaks escaped)."""
    escaped = (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    )
    return f'"{escaped}"'


def jaas_config(mechanism: str, user: str, password: str) -> tuple[str, dict[str, str]]:
    """(``sasl.jaas.config``, other connector options it needs) for a user and password."""
    if mechanism == "GSSAPI":
        raise ValueError(
            "kafka.sasl.mechanism GSSAPI (Kerberos) takes a keytab, not a user name and "
            "password, and the bridge's Python Kafka client (which reads the offsets on the "
            "driver) takes no keytab: use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"
        )
    module = LOGIN_MODULES.get(mechanism)
    if module is None:
        known = ", ".join(sorted(LOGIN_MODULES))
        raise ValueError(f"kafka.sasl.mechanism {mechanism!r} is not one of {known}, GSSAPI")
    if mechanism == "OAUTHBEARER":  # OAuth client credentials (KIP-768)
        secret = jaas_quote(password)
        config = f"{module} required clientId={jaas_quote(user)} clientSecret={secret};"
        return config, {"kafka.sasl.login.callback.handler.class": OAUTH_CALLBACK_HANDLER}
    return f"{module} required username={jaas_quote(user)} password={jaas_quote(password)};", {}


def _pem_blocks(path: str, option: str) -> list[tuple[str, str]]:
    """(label, block text) of every PEM block in file ``path`` (named by ``option`` in errors)."""
    try:
        text = Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeError) as exc:
        raise ValueError(f"{option}: cannot read PEM file {path!r}: {exc}") from None
    return [(m.group(1), m.group(0)) for m in _PEM_BLOCK.finditer(text)]


def pem_stores(cafile: str | None, certfile: str | None, keyfile: str | None) -> dict[str, str]:
    """Connector options of PEM files: PEM *text* in the trust and key store options (read here,
    on the driver, so executors need no copy of the files)."""
    out: dict[str, str] = {}
    if cafile:
        blocks = _pem_blocks(cafile, "kafka.ssl.cafile")
        certs = [b for label, b in blocks if label == "CERTIFICATE"]
        if not certs:
            raise ValueError(f"kafka.ssl.cafile {cafile!r} holds no PEM CERTIFICATE")
        out["kafka.ssl.truststore.type"] = "PEM"
        out["kafka.ssl.truststore.certificates"] = "\n".join(certs)
    if keyfile and not certfile:
        raise ValueError("kafka.ssl.keyfile needs kafka.ssl.certfile (the client certificate)")
    if certfile:
        cert_blocks = _pem_blocks(certfile, "kafka.ssl.certfile")
        key_blocks = _pem_blocks(keyfile, "kafka.ssl.keyfile") if keyfile else cert_blocks
        chain = [b for label, b in cert_blocks if label == "CERTIFICATE"]
        keys = [(label, b) for label, b in key_blocks if label.endswith("PRIVATE KEY")]
        if not chain:
            raise ValueError(f"kafka.ssl.certfile {certfile!r} holds no PEM CERTIFICATE")
        if len(keys) != 1:
            raise ValueError(
                f"{'kafka.ssl.keyfile' if keyfile else 'kafka.ssl.certfile'} must hold exactly "
                f"one PEM private key, found {len(keys)}"
            )
        label, key = keys[0]
        if label not in _PKCS8_KEYS:
            raise ValueError(
                f"the client key is a PEM {label!r}; Kafka's JVM client needs PKCS#8 "
                "('PRIVATE KEY'): convert it with openssl pkcs8 -topk8 -nocrypt"
            )
        out["kafka.ssl.keystore.type"] = "PEM"
        out["kafka.ssl.keystore.certificate.chain"] = "\n".join(chain)
        out["kafka.ssl.keystore.key"] = key
    return out
