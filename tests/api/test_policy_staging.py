"""The policy's staging settings (data.copy_tool, copy_dest, staging_*): read, defaulted,
and refused with the field named."""

from __future__ import annotations

import pytest

from cpn.api.policy import parse_policy
from cpn.core.errors import PolicyError


def test_staging_settings_are_read_and_default():
    data = parse_policy(
        {
            "data": {
                "copy_tool": "rsync",
                "copy_dest": "/scratch/cpn",
                "staging_attempts": 2,
                "staging_backoff_s": 3,
            }
        }
    ).data
    assert (data.copy_tool, data.copy_dest, data.staging_attempts, data.staging_backoff_s) == (
        "rsync",
        "/scratch/cpn",
        2,
        3.0,
    )
    default = parse_policy({}).data
    assert (default.copy_tool, default.staging_attempts) == ("copy", 3)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"copy_tool": "scp"}, "data.copy_tool"),
        ({"copy_dest": "relative/dir"}, "data.copy_dest"),
        ({"copy_dest": "/a/../etc"}, "data.copy_dest"),
        ({"staging_attempts": 0}, "data.staging_attempts"),
        ({"staging_backoff_s": -1}, "data.staging_backoff_s"),
        ({"staging_timeout_s": 0}, "data.staging_timeout_s"),
    ],
)
def test_bad_staging_settings_are_refused_naming_the_field(data, field):
    with pytest.raises(PolicyError) as err:
        parse_policy({"data": data})
    assert field in str(err.value)


def test_cluster_staging_scope_reads_its_claim_and_node_is_the_default():
    data = parse_policy({"data": {"staging_scope": "cluster", "shared_claim": "cpn-data"}}).data
    assert (data.staging_scope, data.shared_claim) == ("cluster", "cpn-data")
    assert parse_policy({}).data.staging_scope == "node"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"staging_scope": "cluster"}, "data.shared_claim"),  # cluster scope needs a claim
        ({"staging_scope": "rack", "shared_claim": "x"}, "data.staging_scope"),
        ({"shared_claim": "Not_A_Claim"}, "data.shared_claim"),
    ],
)
def test_bad_staging_scope_settings_are_refused_naming_the_field(data, field):
    with pytest.raises(PolicyError) as err:
        parse_policy({"data": data})
    assert field in str(err.value)
