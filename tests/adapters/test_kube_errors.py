"""An API server's answer in one line, and which 4xx answers a retry cannot change."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from cpn.adapters.kube import error_line, refused


def answer(status: int, reason: str, body: object) -> ApiException:
    """The client's exception as it raises it for an HTTP answer (headers included)."""
    err = ApiException(status=status, reason=reason)
    err.body = body if isinstance(body, str) else json.dumps(body)
    err.headers = {"Audit-Id": "1234", "Content-Type": "application/json"}
    return err


def test_the_status_body_gives_reason_and_message_on_one_line() -> None:
    """The Kubernetes Status body's reason and message, whitespace folded; no headers."""
    err = answer(
        422,
        "Unprocessable Entity",
        {
            "kind": "Status",
            "reason": "Invalid",
            "message": 'Job.batch "x" is invalid:\n  metadata.annotations: Too long',
            "code": 422,
        },
    )
    assert "HTTP response headers" in str(err)  # what the status used to show
    line = error_line(err)
    assert line == '422 Invalid: Job.batch "x" is invalid: metadata.annotations: Too long'


@pytest.mark.parametrize("body", ["", "not json", "[1, 2]", None])
def test_a_body_that_is_no_status_falls_back_to_the_http_reason(body: str | None) -> None:
    err = ApiException(status=413, reason="Request Entity Too Large")
    err.body = body
    assert error_line(err) == "413 Request Entity Too Large"


def test_other_errors_and_long_messages() -> None:
    assert error_line(ConnectionError("refused\nby peer")) == "ConnectionError: refused by peer"
    assert error_line(TimeoutError()) == "TimeoutError"
    long = error_line(answer(422, "x", {"reason": "Invalid", "message": "m" * 1000}), limit=50)
    assert len(long) == 50 and long.endswith("…")


@pytest.mark.parametrize(
    ("status", "final"),
    [
        (400, True),
        (404, True),
        (413, True),
        (422, True),
        (401, False),
        (403, False),
        (408, False),
        (409, False),
        (429, False),
        (500, False),
        (503, False),
    ],
)
def test_which_answers_refuse_for_good(status: int, final: bool) -> None:
    """4xx refuse the request itself, except those a retry may change: credentials,
    a member quota or admission check that may pass later (403), timeouts, conflicts,
    throttling. 5xx and network errors are the server's, not the request's."""
    assert refused(answer(status, "r", {})) is final
    assert not refused(ConnectionError("down"))
