"""Source options of both engines: the connector mapping (``jvm_kafka_options``) and refusals.

The mapping is a pure function of the options (and the PEM files they name), tested directly;
the JAAS quoting is checked against Java's own ``StreamTokenizer`` (what Kafka's ``JaasConfig``
parses with) in the test session's JVM.
"""

from __future__ import annotations

import pytest
from py4j.java_gateway import get_field

from agents.connection import jaas_quote
from spark_bridge.jvm import jvm_kafka_options
from spark_bridge.source import check_options

CERT = "-----BEGIN CERTIFICATE-----\nMIIBcert{n}\n-----END CERTIFICATE-----"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIEkey\n-----END PRIVATE KEY-----"
RSA_KEY = "-----BEGIN RSA PRIVATE KEY-----\nMIIEkey\n-----END RSA PRIVATE KEY-----"


@pytest.fixture
def pem(tmp_path):
    """Writes a PEM file; returns its path."""

    def write(name: str, *blocks: str) -> str:
        path = tmp_path / name
        path.write_text("subject=CN=x\n" + "\n".join(blocks) + "\n")
        return str(path)

    return write


def test_client_certificate_and_ca_become_pem_text_not_paths(pem):
    chain = [CERT.format(n=1), CERT.format(n=2)]
    out = jvm_kafka_options(
        {
            "kafka.security.protocol": "SSL",
            "kafka.ssl.cafile": pem("ca.pem", CERT.format(n=0)),
            "kafka.ssl.certfile": pem("client.pem", *chain),
            "kafka.ssl.keyfile": pem("client.key", KEY),
            "kafka.ssl.endpoint.identification.algorithm": "",
        }
    )
    assert out == {
        "kafka.security.protocol": "SSL",
        "kafka.ssl.endpoint.identification.algorithm": "",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.certificates": CERT.format(n=0),
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.certificate.chain": "\n".join(chain),
        "kafka.ssl.keystore.key": KEY,
    }


def test_a_certificate_file_holding_its_key_needs_no_key_file(pem):
    out = jvm_kafka_options({"kafka.ssl.certfile": pem("both.pem", KEY, CERT.format(n=1))})
    assert out["kafka.ssl.keystore.key"] == KEY
    assert out["kafka.ssl.keystore.certificate.chain"] == CERT.format(n=1)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"kafka.ssl.certfile": ("c.pem", CERT), "kafka.ssl.keyfile": ("k.pem", RSA_KEY)},
            "PKCS#8",
        ),
        ({"kafka.ssl.certfile": ("c.pem", CERT)}, "exactly one PEM private key"),
        ({"kafka.ssl.certfile": ("c.pem", KEY)}, "holds no PEM CERTIFICATE"),
        ({"kafka.ssl.keyfile": ("k.pem", KEY)}, "needs kafka.ssl.certfile"),
        ({"kafka.ssl.cafile": ("ca.pem", KEY)}, "holds no PEM CERTIFICATE"),
    ],
)
def test_unusable_pem_files_are_refused_clearly(pem, files, message):
    options = {name: pem(file, block.format(n=1)) for name, (file, block) in files.items()}
    with pytest.raises(ValueError, match=message):
        jvm_kafka_options(options)


def test_a_missing_pem_file_names_the_option(tmp_path):
    with pytest.raises(ValueError, match=r"kafka\.ssl\.cafile: cannot read PEM file"):
        jvm_kafka_options({"kafka.ssl.cafile": str(tmp_path / "absent.pem")})


def test_a_store_given_twice_is_refused(pem):
    with pytest.raises(ValueError, match=r"kafka\.ssl\.keystore"):
        jvm_kafka_options(
            {
                "kafka.ssl.certfile": pem("c.pem", CERT.format(n=1), KEY),
                "kafka.ssl.keystore.location": "/etc/keystore.jks",
            }
        )
    with pytest.raises(ValueError, match=r"kafka\.sasl\.jaas\.config"):
        jvm_kafka_options({"kafka.sasl.username": "u", "kafka.sasl.jaas.config": "X required;"})


@pytest.mark.parametrize(
    ("mechanism", "module", "fields"),
    [
        (None, "org.apache.kafka.common.security.plain.PlainLoginModule", "username/password"),
        ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule", "username/password"),
        (
            "scram-sha-256",
            "org.apache.kafka.common.security.scram.ScramLoginModule",
            "username/password",
        ),
        (
            "SCRAM-SHA-512",
            "org.apache.kafka.common.security.scram.ScramLoginModule",
            "username/password",
        ),
        (
            "OAUTHBEARER",
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
            "clientId/clientSecret",
        ),
    ],
)
def test_sasl_mechanism_picks_its_login_module(mechanism, module, fields):
    options = {"kafka.sasl.username": "u", "kafka.sasl.password": "p"}
    if mechanism:
        options["kafka.sasl.mechanism"] = mechanism
    out = jvm_kafka_options(options)
    user, password = fields.split("/")
    assert out["kafka.sasl.jaas.config"] == f'{module} required {user}="u" {password}="p";'
    handler = out.get("kafka.sasl.login.callback.handler.class")
    assert (handler is not None) == (mechanism == "OAUTHBEARER")


def test_gssapi_with_a_password_is_refused_and_an_explicit_jaas_config_passes():
    with pytest.raises(ValueError, match=r"GSSAPI .*keytab"):
        jvm_kafka_options(
            {
                "kafka.sasl.mechanism": "GSSAPI",
                "kafka.sasl.username": "u",
                "kafka.sasl.password": "p",
            }
        )
    jaas = 'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/k";'
    options = {"kafka.sasl.mechanism": "GSSAPI", "kafka.sasl.jaas.config": jaas}
    assert jvm_kafka_options(options) == options


def test_extras_pass_through_or_are_refused():
    out = jvm_kafka_options(
        {"failondataloss": "false", "minPartitions": "8", "kafka.fetch.max.bytes": "1048576"}
    )
    assert out == {
        "failOnDataLoss": "false",
        "minPartitions": "8",
        "kafka.fetch.max.bytes": "1048576",
    }
    with pytest.raises(ValueError, match="'maxrecordsperpartitio' is not an option of Spark's"):
        jvm_kafka_options({"maxRecordsPerPartitio": "5"})
    with pytest.raises(ValueError, match="'subscribepattern' is not an option"):
        jvm_kafka_options({"subscribePattern": "x.*"})


def test_the_python_source_refuses_options_it_would_ignore():
    check_options({"kafka.bootstrap.servers": "h:1", "TOPIC": "t", "maxOffsetsPerTrigger": "5"})
    with pytest.raises(ValueError, match="'failOnDataLoss' is not an option of the fiba-kafka"):
        check_options({"failOnDataLoss": "false"})
    with pytest.raises(ValueError, match=r"kafka\.ssl\.truststore\.location"):
        check_options({"kafka.ssl.truststore.location": "/x"})


@pytest.mark.spark
@pytest.mark.parametrize("secret", ['p"ss', "back\\slash", "two\nlines\r", "plain", 'x\\"y'])
def test_jaas_quoting_round_trips_through_javas_tokenizer(spark, secret):
    """Kafka's ``JaasConfig`` reads option values with ``java.io.StreamTokenizer``."""
    jvm = spark.sparkContext._jvm
    config = jvm_kafka_options({"kafka.sasl.username": "u", "kafka.sasl.password": secret})
    tokenizer = jvm.java.io.StreamTokenizer(
        jvm.java.io.StringReader(config["kafka.sasl.jaas.config"])
    )
    tokenizer.slashSlashComments(True)
    tokenizer.slashStarComments(True)
    for char in "-_${}":
        tokenizer.wordChars(ord(char), ord(char))
    values = []
    for _ in range(100):  # a few tokens; bounded in case the tokenizer never reaches the end
        token = tokenizer.nextToken()
        if token == -1:  # StreamTokenizer.TT_EOF
            break
        if token == ord('"'):
            values.append(get_field(tokenizer, "sval"))
    assert values == ["u", secret]
    assert jaas_quote(secret).startswith('"')


@pytest.mark.spark
def test_both_engines_refuse_an_option_they_would_ignore(spark):
    from spark_bridge.read import read_aggregates

    with pytest.raises(ValueError, match="'failOnDataLoss' is not an option of the fiba-kafka"):
        read_aggregates(spark, "127.0.0.1:1", "t", engine="python", options={"failOnDataLoss": "1"})
    with pytest.raises(ValueError, match="'maxrecordsperpartitio' is not an option of Spark's"):
        read_aggregates(
            spark, "127.0.0.1:1", "t", engine="jvm", options={"maxRecordsPerPartitio": "1"}
        )
    direct = spark.read.format("fiba-kafka").options(
        **{"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t", "failOnDataLoss": "false"}
    )
    with pytest.raises(Exception, match=r"(?i)'failOnDataLoss' is not an option of the fiba-kafka"):
        direct.load().collect()


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.parametrize("engine", ["python", "jvm"])
def test_spark_read_stops_on_an_unknown_option_with_exit_code_2(spark, kafka_bootstrap, engine):
    from click.testing import CliRunner

    from spark_bridge.cli import spark_read

    args = ["--broker", kafka_bootstrap, "--engine", engine, "--option", "bogus=1", "--no-progress"]
    result = CliRunner().invoke(spark_read, args)
    assert result.exit_code == 2, result.output
    assert "'bogus' is not an option" in result.output
    assert "Traceback" not in result.output


def test_the_python_source_takes_an_isolation_level_and_refuses_an_unknown_one():
    from spark_bridge.kafka import KafkaSourceError, client_options

    base = {"kafka.bootstrap.servers": "h:1"}
    check_options({**base, "kafka.isolation.level": "read_committed"})
    assert "isolation_level" not in client_options(base)
    committed = client_options({**base, "kafka.isolation.level": "READ_COMMITTED"})
    assert committed["isolation_level"] == "read_committed"
    with pytest.raises(KafkaSourceError, match="must be one of read_uncommitted, read_committed"):
        client_options({**base, "kafka.isolation.level": "committed"})
