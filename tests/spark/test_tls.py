"""The data source over TLS: a node that listens with TLS only (mutual TLS:
it asks for a client certificate), written to and read from by Spark with the
``tls*`` options."""

from __future__ import annotations

import pytest

from tests.security.security_kit import PKI, TLSNode


@pytest.fixture(scope="module")
def tls_node(tmp_path_factory):
    pki = PKI(tmp_path_factory.mktemp("pki"))
    node = TLSNode(tmp_path_factory.mktemp("tls-node"), pki).start()
    yield node
    node.stop()


def tls_options(node: TLSNode) -> dict[str, str]:
    return {"nodes": f"127.0.0.1:{node.port}", "tls": "true",
            "tlsCaCerts": str(node.pki.ca.cert_file),
            "tlsCertFile": str(node.client_cert.cert), "tlsKeyFile": str(node.client_cert.key)}


def test_write_and_read_through_tls(spark, tls_node):
    df = spark.createDataFrame([(f"row-{i}",) for i in range(200)], ["body"])
    df.write.format("disquette").options(**tls_options(tls_node)).option("queue", "tls") \
        .mode("append").save()
    with tls_node.client() as r:
        assert r.execute_command("QLEN", "tls") == 200
    rows = (spark.read.format("disquette").options(**tls_options(tls_node))
            .option("queues", "tls").option("maxJobs", "500").load().collect())
    assert sorted(r.body for r in rows) == sorted(f"row-{i}" for i in range(200))


def test_without_the_client_certificate_the_write_fails_clearly(spark, tls_node):
    opts = tls_options(tls_node)
    del opts["tlsCertFile"], opts["tlsKeyFile"]
    df = spark.createDataFrame([("x",)], ["body"])
    with pytest.raises(Exception, match=r"(?i)ssl|tls|certificate|connection"):
        df.write.format("disquette").options(**opts).option("queue", "tls2").mode("append").save()
    with tls_node.client() as r:
        assert r.execute_command("QLEN", "tls2") == 0
