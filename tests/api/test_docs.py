"""The documentation stays true to the code: its YAML examples and its configuration table.

Every fenced ```yaml block of ``docs/*.md`` and ``README.md`` is checked the way the hub
would check it. Each YAML document in a block is an AIJob (the CRD's schema in ``crds/``
through ``cpn validate``'s checker, then :func:`cpn.api.aijob.parse_aijob`), a policy
ConfigMap (:func:`cpn.api.policy.parse_policy_configmap`), a bare policy (a mapping with
neither ``kind`` nor ``apiVersion``: :func:`cpn.api.policy.parse_policy`), a MemberCluster
(the CRD's schema), or another Kubernetes kind (only read as YAML).

Convention for blocks that are not complete documents, a comment on the block's first line:

- ``# docs: partial``: a fragment (a few keys of a larger file) or a file of another tool;
  only read as YAML. Words may follow the marker on the same line.
- ``# docs: alternatives``: each top-level key, with the comment lines just above it, is
  one policy of its own (for a list of alternative ``formula:`` lines).

``UNMARKED`` names blocks of files this test's owner does not edit that need one of
these conventions, by file and first line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest
import yaml

from cpn.api.aijob import parse_aijob
from cpn.api.crdschema import load_crds
from cpn.api.policy import parse_policy, parse_policy_configmap
from cpn.api.validation import Validator
from cpn.config import OperatorConfig
from cpn.core.errors import CpnError

ROOT = Path(__file__).resolve().parents[2]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
ADMIN_GUIDE = ROOT / "docs" / "admin-guide.md"
CRDS = load_crds(ROOT / "crds")

PARTIAL = "# docs: partial"
ALTERNATIVES = "# docs: alternatives"
#: (file, first line of the block) -> convention, for blocks in files owned by others.
UNMARKED = {
    ("docs/policy.md", "# shortest first with aging (the default)"): ALTERNATIVES,
}

#: What the readers raise for a document they refuse.
READER_ERRORS = (CpnError, ValueError, TypeError, KeyError)

_FENCE = re.compile(r"^```yaml[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_TOP_KEY = re.compile(r"^[A-Za-z_][\w-]*:")


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced YAML block of a Markdown file."""

    file: str
    line: int
    text: str

    @property
    def first_line(self) -> str:
        return self.text.strip().splitlines()[0].strip() if self.text.strip() else ""

    @property
    def convention(self) -> str:
        for marker in (PARTIAL, ALTERNATIVES):
            if self.first_line.startswith(marker):
                return marker
        return UNMARKED.get((self.file, self.first_line), "")

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def yaml_blocks() -> list[Block]:
    """Every ```yaml block of the documentation, with the line where it starts."""
    out = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 2
            out.append(Block(str(path.relative_to(ROOT)), line, match.group(1)))
    return out


BLOCKS = yaml_blocks()


def alternatives(text: str) -> Iterator[str]:
    """Split a block into one chunk per top-level key (comments above a key go with it)."""
    current: list[str] = []
    comments: list[str] = []
    for line in text.splitlines():
        if _TOP_KEY.match(line):
            if any(_TOP_KEY.match(c) for c in current):
                yield "\n".join(current) + "\n"
                current = []
            current += [*comments, line]
            comments = []
        elif not line.strip() or line.startswith("#"):
            comments.append(line)
        else:
            current += [*comments, line]
            comments = []
    if current:
        yield "\n".join(current + comments) + "\n"


def kind_of(document: Any) -> str:
    """What a YAML document is, for this test: AIJob, policy, ConfigMap-policy, ..."""
    if not isinstance(document, dict):
        return "not-a-mapping"
    if "kind" not in document and "apiVersion" not in document:
        return "policy"
    kind = str(document.get("kind", ""))
    if kind == "ConfigMap" and "policy.yaml" in (document.get("data") or {}):
        return "policy-configmap"
    return kind


def check(block: Block) -> list[str]:
    """Problems of one block, one line each (empty when every document is accepted)."""
    if block.convention == PARTIAL:
        list(yaml.safe_load_all(block.text))  # a fragment must still be YAML
        return []
    if block.convention == ALTERNATIVES:
        problems = []
        for chunk in alternatives(block.text):
            try:
                parse_policy(chunk)
            except READER_ERRORS as err:
                problems.append(f"{chunk.strip()!r}: {err}")
        return problems
    validator = Validator(CRDS, ignore_unknown=True)
    validator.validate_text(block.text, block.where)
    problems = [str(p) for p in validator.problems]
    documents = list(yaml.safe_load_all(block.text))
    for document in documents:
        kind = kind_of(document)
        try:
            if kind == "AIJob":
                parse_aijob(document, user="docs", group="docs")
            elif kind == "policy":  # as the operator reads it: text, YAML 1.2
                parse_policy(block.text if len(documents) == 1 else document)
            elif kind == "policy-configmap":
                parse_policy_configmap(document)
        except READER_ERRORS as err:
            problems.append(f"{kind}: {err}")
    return problems


def kinds(block: Block) -> list[str]:
    """The kinds of the documents of a complete block (empty for marked ones)."""
    if block.convention:
        return []
    return [kind_of(d) for d in yaml.safe_load_all(block.text) if d is not None]


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_yaml_block_is_accepted_by_the_real_readers(block: Block) -> None:
    """Each documented AIJob or policy is accepted by the CRD schema and the operator's parsers."""
    assert check(block) == [], block.where


def test_guides_carry_complete_examples() -> None:
    """The user guide shows a complete AIJob and the admin guide a complete policy."""
    by_file: dict[str, list[str]] = {}
    for block in BLOCKS:
        by_file.setdefault(block.file, []).extend(kinds(block))
    assert "AIJob" in by_file.get("docs/user-guide.md", [])
    assert {"policy", "policy-configmap"} & set(by_file.get("docs/admin-guide.md", []))


def test_a_broken_example_is_caught() -> None:
    """The checker refuses a wrong AIJob, a wrong policy and a wrong alternative."""
    aijob = (
        "apiVersion: cpn.io/v1alpha1\nkind: AIJob\nmetadata: {name: x, namespace: ns}\n"
        "spec:\n  resources: {gpus: 1, gpuTypes: [%s]}\n"
        "  template: {spec: {containers: [{name: c, image: i}]}}\n"
    )
    assert check(Block("x.md", 1, aijob % "A100-80GB")) == []
    assert check(Block("x.md", 1, aijob % "A100-81GB"))
    assert check(Block("x.md", 1, (aijob % "V100").replace("gpus: 1", "gpus: 1, bogus: 1")))
    assert check(Block("x.md", 1, "formula: 'wait * 2'\n"))
    assert check(Block("x.md", 1, f"{ALTERNATIVES}\nformula: 'wait_s'\nformula: 'wat'\n"))
    assert len(list(alternatives("# a\nformula: 'x'\n# b\nformula: |\n  y\n  + z\n"))) == 2


def _documented_default(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return '""'
    return str(value)


def test_every_setting_is_documented_with_its_default() -> None:
    """Each CPN_* variable of OperatorConfig has an admin-guide row with the code's default."""
    text = ADMIN_GUIDE.read_text(encoding="utf-8")
    defaults = OperatorConfig()
    missing = []
    for field in fields(OperatorConfig):
        name = f"CPN_{field.name.upper()}"
        row = f"| `{name}` | `{_documented_default(getattr(defaults, field.name))}` |"
        if row not in text:
            missing.append(row)
    assert missing == []


def test_no_setting_is_documented_that_the_code_lacks() -> None:
    """Every CPN_* row of the admin guide's settings table is a field of OperatorConfig."""
    known = {f"CPN_{f.name.upper()}" for f in fields(OperatorConfig)}
    rows = re.findall(r"^\| `(CPN_[A-Z0-9_]+)` \|", ADMIN_GUIDE.read_text(encoding="utf-8"), re.M)
    assert rows, "the settings table is missing"
    assert sorted(set(rows) - known) == []


def test_relative_links_resolve() -> None:
    """Every relative Markdown link of the docs and README points at a file of the repository."""
    broken = []
    for path in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (path.parent / target).exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert broken == []


def test_architecture_picture_matches_its_source() -> None:
    """The committed SVG has exactly the nodes of the dot source on the architecture page."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    source = re.search(r"^```dot\n(.*?)^```$", page, re.M | re.S)
    assert source is not None
    declared = set(re.findall(r"^\s+(\w+)\s+\[label=", source.group(1), re.M))
    svg = (ROOT / "docs" / "architecture.svg").read_text(encoding="utf-8")
    drawn = set(re.findall(r'<g id="node\d+" class="node">\s*<title>(\w+)</title>', svg))
    assert declared and drawn == declared
    assert "architecture.svg" in page


def test_every_module_the_architecture_picture_names_exists() -> None:
    """Each ``layer/module`` a box of the picture (dot and Mermaid) names is a module of
    cpn, so that a module renamed or removed cannot stay drawn."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    pictures = re.findall(r"^```(?:dot|mermaid)\n(.*?)^```$", page, re.M | re.S)
    named = set()
    for picture in pictures:
        named |= set(re.findall(r"\b(core|api|runtime|adapters|handlers|sim|cli)/(\w+)", picture))
    assert len(pictures) == 2 and len(named) >= 6
    package = ROOT / "operator" / "cpn"
    missing = [f"{layer}/{name}" for layer, name in sorted(named)]
    missing = [m for m in missing if not (package / f"{m}.py").exists()]
    assert missing == []
