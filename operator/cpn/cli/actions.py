"""``cpn cancel|suspend|resume|rerun NAME [-n NAMESPACE]``: act on an AIJob as kubectl would.

- ``cancel``: delete the AIJob (``kubectl delete aijob NAME``); cpn stops its member Job.
- ``suspend`` / ``resume``: set ``spec.suspend`` true / false (``kubectl patch --type=merge``);
  a running job is stopped and goes back to the queue, held until resumed.
- ``rerun``: create a new AIJob with the same spec, named ``NAME-rerun-xxxxx``, annotated
  ``cpn.io/rerun-of: NAME`` (a finished AIJob stays the record of its run).

Whoever the kubeconfig names acts (``--as USER`` / ``--as-group GROUP`` impersonate, as
kubectl's flags); RBAC decides: a group admin (``cpn-group-admin``, bound in each namespace
of the group) may act on the group's jobs and gets the API server's own refusal elsewhere.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from cpn.adapters.hubactions import ActionRefused, AIJobActions, impersonate
from cpn.adapters.hubcli import hub_api, hub_namespace, on_hub

VERBS = ("cancel", "suspend", "resume", "rerun")


def _parser(verb: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"cpn {verb}", description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the AIJob")
    parser.add_argument("-n", "--namespace", help="its namespace (default: the context's)")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG, else ~/.kube/config")
    parser.add_argument("--as", dest="as_user", metavar="USER", help="act as this user")
    parser.add_argument("--as-group", metavar="GROUP", help="act as a member of this group")
    return parser


def run(verb: str, argv: Sequence[str]) -> int:
    args = _parser(verb).parse_args(argv)

    def act() -> int:
        api = hub_api(args.kubeconfig)
        impersonate(api, args.as_user, args.as_group)
        namespace = args.namespace or hub_namespace(args.kubeconfig)
        actions = AIJobActions(api)
        where = f"aijob {namespace}/{args.name}"
        try:
            if verb == "cancel":
                actions.cancel(namespace, args.name)
                print(f"{where} cancelled (deleted)")
            elif verb in {"suspend", "resume"}:
                actions.set_suspend(namespace, args.name, verb == "suspend")
                print(f"{where} {verb}d")
            else:
                new = actions.rerun(namespace, args.name)
                print(f"{where} re-run as aijob {namespace}/{new}")
        except ActionRefused as err:
            print(f"cpn {verb}: {err.message} (HTTP {err.status})", file=sys.stderr)
            return 1
        return 0

    return on_hub(f"cpn {verb}", act)


def _verb(verb: str) -> Callable[[Sequence[str]], int]:
    def main(argv: Sequence[str]) -> int:
        return run(verb, argv)

    main.__doc__ = f"``cpn {verb}``"
    return main


cancel = _verb("cancel")
suspend = _verb("suspend")
resume = _verb("resume")
rerun = _verb("rerun")
