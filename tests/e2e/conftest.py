"""End-to-end tests on the local test bed; the fixtures live in testbed.fixtures."""

from testbed.fixtures import member_namespace, testbed

__all__ = ["member_namespace", "testbed"]
