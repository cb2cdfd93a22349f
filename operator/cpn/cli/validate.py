"""``cpn validate FILE...``: check AIJobs and policies offline, before ``kubectl apply``.

The checks are :mod:`cpn.api.validation`'s: each document is recognised (AIJob,
MemberCluster, a policy ConfigMap, a bare policy, a List of them) and checked the
way the hub would check it. Exit status: 0 when every document is valid, 1 when
any problem is found (one line each:
``FILE:LINE: document N (Kind name): field.path: message``), 2 for bad usage. Warnings
(``...: field.path: warning: message``, e.g. a domain binding a group the policy names
nowhere else) are printed after the problems and do not change the exit status; for a
policy with domains a note on stderr says what only the operator can check, at run time.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from cpn.api.crdschema import crd_dir, load_crds
from cpn.api.validation import Validator
from cpn.api.yamlsafe import YamlError


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="cpn validate",
        description="Check AIJob, MemberCluster and policy manifests offline.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="YAML file, directory, or -")
    parser.add_argument("--crds", type=Path, help="directory of the CRDs (default: cpn's own)")
    parser.add_argument(
        "--ignore-unknown", action="store_true", help="skip kinds cpn does not check"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    args = parser.parse_args(list(argv))
    directory = args.crds or crd_dir()
    if directory is None or not directory.is_dir():
        print("cpn validate: CRD directory not found; pass --crds DIR", file=sys.stderr)
        return 2
    try:
        crds = load_crds(directory)
    except (YamlError, OSError, KeyError, TypeError) as err:
        print(f"cpn validate: cannot read the CRDs in {directory}: {err}", file=sys.stderr)
        return 2
    validator = Validator(crds, ignore_unknown=args.ignore_unknown)
    for path in args.files:
        validator.validate_path(path)
    for rule in sorted(validator.unchecked_rules):
        print(f"cpn validate: CEL rule not checked offline: {rule}", file=sys.stderr)
    for problem in validator.problems + validator.warnings:
        print(problem)
    if validator.domains_seen:
        print(
            "cpn validate: domains checked offline (fields, names, bindings, one default, "
            "quotas per domain); whether two select one node, or one selects no GPU node, "
            "the operator checks at run time against the members' nodes",
            file=sys.stderr,
        )
    if not args.quiet:
        count = len(validator.problems)
        verdict = "all valid" if not count else f"{count} problem{'s' * (count != 1)}"
        if validator.warnings:
            warned = len(validator.warnings)
            verdict += f", {warned} warning{'s' * (warned != 1)}"
        print(f"{validator.documents} document(s) checked: {verdict}", file=sys.stderr)
    return 1 if validator.problems else 0
