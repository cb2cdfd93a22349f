"""Fixtures shared by every test folder: the test bed lives in testbed.fixtures."""

from testbed.fixtures import member_namespace, testbed

__all__ = ["member_namespace", "testbed"]
