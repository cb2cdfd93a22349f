"""What a probe says when ``/readyz`` answers with failed checks (cpn.adapters.probe)."""

from __future__ import annotations

from cpn.adapters.probe import failed_checks


def testfailed_checks_are_named_from_the_readyz_report():
    body = b"[+]ping ok\n[-]etcd failed: reason withheld\n[-]shutdown failed: reason withheld\n"
    assert failed_checks(body) == "failed checks: etcd, shutdown"


def test_a_body_without_check_lines_is_given_as_text_cut_short():
    assert failed_checks(b"  service\nunavailable ") == "service unavailable"
    assert len(failed_checks(b"x" * 1000)) == 200
