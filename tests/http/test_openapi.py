"""schemathesis against /openapi.json of a live node: for inputs generated
from the document, no server error and every response (status, content type,
headers, body) matches what the document says."""

from __future__ import annotations

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import checks

from tests.harness import WAIT_TIMEOUT, NodeProcess
from tests.http.conftest import start_http_node

CHECKS = [checks.status_code_conformance, checks.content_type_conformance,
          checks.response_headers_conformance, checks.response_schema_conformance]
# 5xx replies that answer a valid request for what it is (documented in
# the schema): REPLICATE above the number of nodes gets 503 NOREPL.
EXPECTED_5XX = {503: {"NOREPL"}}


@pytest.fixture(scope="module")
def live(hfactory) -> NodeProcess:
    n = start_http_node(hfactory)
    with n.raw() as r:      # something to find: a queue with a job, a paused queue
        assert r.call("ADDJOB", "q", "body", 0).startswith(b"+")
        assert r.call("PAUSE", "p", "in") == b"+in\r\n"
    return n


@pytest.fixture(scope="module")
def api_schema(live):
    return schemathesis.openapi.from_url(f"{live.http_url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_response_matches_the_document(case, live):
    if case.method == "GET" and case.path == "/queues/{queue}/jobs":
        case.query = {**(case.query or {}), "nohang": "true"}  # never a long poll here
    response = case.call(timeout=WAIT_TIMEOUT)
    assert response.status_code < 500 or (
        response.json().get("error") in EXPECTED_5XX.get(response.status_code, ())), \
        f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:300]}"
    case.validate_response(response, checks=CHECKS)
    # The node is still fine after every request.
    assert requests.get(f"{live.http_url}/cluster", timeout=WAIT_TIMEOUT).status_code == 200
