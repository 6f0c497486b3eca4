"""The REST API fuzzed from its own ``/openapi.json`` (schemathesis) against a real ``serve``
process on each backend: no 5xx, every response as the schema says, and no response to one
user's key ever carrying another user's data.

Two users are seeded with distinctive canary strings; the fuzzer sends its requests with
ana's keys only (an admin key, and a read key that must meet 403s), so ben's data stays in
place and must never appear in any answer. ``ELASTIMEM_FUZZ_REQUESTS`` sets how many
requests each backend gets (default 2,000).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import requests

pytest.importorskip("starlette", reason="the server needs the extra elastimem[server]")
pytest.importorskip("uvicorn", reason="the server needs the extra elastimem[server]")
schemathesis = pytest.importorskip("schemathesis", reason="fuzzing needs schemathesis (dev)")

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    negative_data_rejection,
    positive_data_acceptance,
)

from tests.service.test_keys import add_key, call  # noqa: E402
from tests.service.test_server import (  # noqa: E402
    BACKENDS,
    backend_target,
    start_server,
    stop_server,
)

REQUESTS = int(os.environ.get("ELASTIMEM_FUZZ_REQUESTS", "2000"))
ANA_CANARY = "quokka-7f3a-ana"
BEN_CANARY = "axolotl-9c2e-ben"


def _seed(server: Any, token: str, canary: str) -> None:
    for i in range(3):
        turn = {"user_text": f"My secret word is {canary} number {i}", "assistant_text": "Ok."}
        assert call(server, "POST", "/v1/turns", token, turn)[0] == 201
    assert call(server, "PUT", "/v1/facts/secret", token, {"value": canary})[0] == 200
    assert call(server, "POST", "/v1/lessons", token, {"text": f"say {canary}"})[0] == 201


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_api_fuzzed_from_its_schema(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    made = tmp_path / "made.json"
    ana_admin = add_key(made, "ana", "admin", "ana-admin")
    ana_read = add_key(made, "ana", "read", "ana-read")
    ben = add_key(made, "ben", "admin", "ben")
    server = start_server(
        tmp_path, "--read-timeout", "10", keys=json.loads(made.read_text()),
        target=backend_target(backend, request),
    )  # fmt: skip
    statuses: Counter[int] = Counter()
    try:
        _seed(server, ana_admin, ANA_CANARY)
        _seed(server, ben, BEN_CANARY)
        # A refusal of invalid data may also be 413 (a body over the limit) or 408; valid
        # data may still be refused by what the schema cannot say: 422 (a fact key with no
        # letters or digits, a value the guards refuse), 413 (a long text in UTF-8).
        refusals = [400, 401, 403, 404, 405, 408, 413, 422, 429]
        accepted = ["2xx", 401, 403, 404, 408, 413, 422, 429]
        config = schemathesis.Config.from_dict({"checks": {
            "negative_data_rejection": {"expected-statuses": refusals},
            "positive_data_acceptance": {"expected-statuses": accepted},
        }})  # fmt: skip
        schema = schemathesis.openapi.from_url(f"{server.base}/openapi.json", config=config)
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 15
        modes = [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]
        pairs = [(operation, mode) for operation in operations for mode in modes]
        per_pair = -(-REQUESTS // len(pairs))
        for _ in range(4):  # operations with few distinct cases run short: go round again
            for operation, mode in pairs:
                if sum(statuses.values()) >= REQUESTS:
                    break
                _fuzz(operation, mode, per_pair, server.base, [ana_admin, ana_read], statuses)
        # ben's data is still there, so its absence from every answer above meant something.
        response = requests.get(f"{server.base}/v1/export", timeout=60,
                                headers={"Authorization": f"Bearer {ben}"})  # fmt: skip
        status, export = response.status_code, response.text
        assert status == 200 and BEN_CANARY in export and ANA_CANARY not in export
    finally:
        assert stop_server(server) == 0, server.log()
    total = sum(statuses.values())
    print(f"\n{backend}: {total} fuzzed requests, statuses {dict(sorted(statuses.items()))}")
    assert total >= REQUESTS
    assert not [s for s in statuses if s >= 500], statuses
    assert "Traceback" not in server.log()


def test_what_the_fuzzer_found_stays_fixed(tmp_path: Path) -> None:
    """The schema-valid requests the server refused, and the document's gaps (quick, no
    fuzzing); the refusals it found are rows of test_server's BAD_INPUTS."""
    made = tmp_path / "made.json"
    token = add_key(made, "ana", "admin", "ana")
    server = start_server(tmp_path, keys=json.loads(made.read_text()))
    try:
        # An integral float is an integer in JSON Schema; an optional field may be null.
        assert call(server, "POST", "/v1/recall", token, {"query": "x", "k": 3.0})[0] == 200
        assert call(server, "POST", "/v1/recall", token, {"query": "x", "until": None})[0] == 200
        # Valid RFC 3339 times whose UTC is outside years 1-9999: the nearest one, not a 400.
        edges = {"query": "x", "since": "0001-01-01T00:00:00+01:01",
                 "until": "9999-12-31T23:59:59-00:01"}  # fmt: skip
        assert call(server, "POST", "/v1/recall", token, edges)[0] == 200
        document = requests.get(f"{server.base}/openapi.json", timeout=30).json()
        erase = document["paths"]["/v1/erase"]["post"]["requestBody"]
        assert erase["required"] and "oneOf" in erase["content"]["application/json"]["schema"]
        history = document["paths"]["/v1/facts/{key}/history"]["get"]
        fact = history["responses"]["200"]["content"]["application/json"]["schema"]
        assert fact["properties"]["versions"]["items"]["properties"]["invalidated_by"] == {
            "type": ["integer", "null"]
        }
        for status in ("403", "408", "429"):
            assert status in history["responses"]
    finally:
        assert stop_server(server) == 0


def _fuzz(
    operation: Any, mode: Any, examples: int, base: str, tokens: list[str],
    statuses: Counter[int],
) -> None:  # fmt: skip
    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate])  # no shrinking: it took minutes  # fmt: skip
    @given(case=operation.as_strategy(generation_mode=mode), token=st.sampled_from(tokens))
    def run(case: Any, token: str) -> None:
        response = case.call(base_url=base, headers={"Authorization": f"Bearer {token}"},
                             timeout=30)  # fmt: skip
        statuses[response.status_code] += 1
        text = response.content.decode("utf-8", "replace")
        assert BEN_CANARY not in text, (case.as_curl_command(), text[:500])
        assert response.status_code < 500, (case.as_curl_command(), text[:500])
        # /mcp speaks MCP, not REST: a schema-valid request there is no valid MCP message.
        skip = [positive_data_acceptance] if case.operation.path == "/mcp" else []
        if _mutates_authorization(case):  # replaced above by a valid key: not invalid any more
            skip.append(negative_data_rejection)
        case.validate_response(response, headers={"Authorization": f"Bearer {token}"},
                               excluded_checks=skip)  # fmt: skip

    try:
        run()
    except Unsatisfiable:  # no invalid case exists (an operation without arguments)
        assert mode == schemathesis.GenerationMode.NEGATIVE


def _mutates_authorization(case: Any) -> bool:
    data = case.meta.phase.data if case.meta is not None else None
    names = [getattr(data, "parameter", None)]
    names += [getattr(m, "parameter", None) for m in getattr(data, "mutations", None) or ()]
    return any(str(name).lower() == "authorization" for name in names)
