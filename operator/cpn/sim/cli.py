"""``cpn simulate``: run a trace through the scheduler offline, convert and generate traces.

::

    cpn simulate --trace T.csv --clusters C.yaml --policy NAME[,NAME...]|FILE.yaml
                 [--estimator oracle|noisy|size-oracle|user|predictor] [--sigma S] [--seed N]
                 [--tick-s S] [--out DIR] [--report DIR] [--json]
                 [--eta [--eta-max-cycles N] [--eta-every N]]
                 [--locality aware|blind|both] [--cache-gb GB] [--by-group]
                 [--decisions FILE [--decisions-window FROM,UNTIL]]
    cpn simulate convert gavel FILE.trace... --out DIR [--reference-gpu V100]
    cpn simulate convert tiresias 60_job.csv --out FILE.csv
    cpn simulate generate --jobs N [--rate-per-h R] [--seed N] [--reference-gpu G]
                 [--data-clusters a,b] --out FILE.csv
    cpn simulate datasets --trace T.csv --clusters C.yaml --out FILE.csv [--seed N]
                 [--per-group K] [--median-gb G] [--sigma S] [--zipf S]
    cpn simulate philly [--suites S] [--traces T] [--checkpointable 0,0.5,1] [--out DIR]
                 [--json]   (the README's comparison tables; exit 1 when a check fails)

With ``--json`` the main form prints exactly one JSON object: one policy -> its
metrics; several -> ``{policy: metrics}``. With ``--out`` it also writes
``metrics.json``, ``jobs-<policy>.csv`` and the PNG plots there. ``--report DIR``
writes the same plus ``report.md`` (what ran, the table, the plots, the command).
``--eta`` records every job's first ETA (the operator's projection, costly: one
projection per arrival instant) and adds its accuracy (``eta`` in each policy's
metrics, a table and a histogram in the report), raw and calibrated from
experience (:mod:`cpn.core.eta_calibration`, the operator's calibration).
``--locality both`` runs each policy twice, placing by where data is (``NAME-aware``)
and blind to it (``NAME-blind``, the policy's ``data.locality: false``); the table's
``moved GB`` is the data and images moved between clusters. ``--cache-gb`` bounds every
member's data cache (``data.default_cache_gb``). ``datasets`` writes a data-sharing
trace: one dataset per job, by the law of :mod:`cpn.sim.datatrace`. ``--by-group`` adds
``by_group`` to each policy's metrics (:mod:`cpn.sim.groups`): the group that submitted
the most work, its average wait and the other groups' (fair share's measure).
``--decisions FILE`` writes the run's decision log, every cycle's snapshot and plan in
the operator's format (:mod:`cpn.decisions`; about 50 KB a cycle on the Philly windows):
``cpn explain JOB --log FILE --at SECONDS`` tells why a job waited at that simulated
instant, ``cpn replay FILE`` plans every cycle again; ``--decisions-window`` keeps only the
cycles of that span of simulated seconds (Gavel's long traces log gigabytes whole).
Exit codes: 0 ok, 2 bad input (the message names the file, row or field).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cpn.core.errors import CpnError
from cpn.core.policy import QueuePolicy

if TYPE_CHECKING:
    from cpn.core.model import CyclePlan, Snapshot
    from cpn.decisions import DecisionLog
    from cpn.sim.trace import TraceJob
    from cpn.sim.world import CycleRecorder
from cpn.sim.estimators import ESTIMATORS


def _main_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cpn simulate",
        description="Simulate a job trace on member clusters under one or more policies. "
        "Sub-commands: 'convert' (public traces -> trace CSV), 'generate' (synthetic trace).",
    )
    p.add_argument("--trace", required=True, help="trace CSV (issue 2's contract)")
    p.add_argument("--clusters", required=True, help="cluster YAML")
    p.add_argument(
        "--policy",
        required=True,
        help="preset name(s), comma-separated (fifo, sjf, oracle, las, gavel, default), "
        "or a policy YAML file",
    )
    p.add_argument("--estimator", choices=ESTIMATORS, default="oracle")
    p.add_argument("--sigma", type=float, default=0.5, help="log-normal sigma of 'noisy'")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--tick-s",
        type=float,
        default=None,
        help="cycle interval for preemptive policies (default 300 when preemption is on)",
    )
    p.add_argument("--out", help="directory for metrics.json, per-job CSVs and plots")
    p.add_argument("--report", help="directory for report.md with the table and plots")
    p.add_argument(
        "--eta",
        action="store_true",
        help="record each job's first ETA and report its accuracy (slow on long queues)",
    )
    p.add_argument(
        "--eta-max-cycles",
        type=int,
        default=None,
        help="future cycles one ETA projection may replay (default 400)",
    )
    p.add_argument(
        "--eta-every",
        type=int,
        default=1,
        help="project only every N-th job (a sample; N times cheaper on long queues)",
    )
    p.add_argument(
        "--eta-arrivals-h",
        type=float,
        default=None,
        help="projections expect the last H hours of submissions to recur (ten times over)",
    )
    p.add_argument(
        "--checkpointable",
        type=_share,
        default=0.0,
        help="share of jobs that checkpoint (so may be preempted) where the trace's "
        "checkpoint column is blank: 0 (default), 0.5, 1, ...",
    )
    p.add_argument(
        "--unlabelled",
        action="store_true",
        help="hide each job's model and declared work from the scheduler (submit time, "
        "GPUs, user and group remain), as on most real clusters",
    )
    p.add_argument(
        "--locality",
        choices=("aware", "blind", "both"),
        default=None,
        help="place by where data is, blind to it, or both in one run (default: the policy's)",
    )
    p.add_argument(
        "--cache-gb", type=float, default=None, help="every member's data cache (GB; unlimited)"
    )
    p.add_argument(
        "--by-group",
        action="store_true",
        help="add waits per group: the dominant group's (most work submitted) and the others'",
    )
    p.add_argument(
        "--decisions",
        type=Path,
        help="write the run's decision log to this file (overwritten; one policy only): "
        "every cycle's snapshot and plan, as the operator logs them, for `cpn explain "
        "JOB --log FILE [--at SECONDS]` and `cpn replay FILE`",
    )
    p.add_argument(
        "--decisions-window",
        type=_window,
        metavar="FROM,UNTIL",
        help="with --decisions: only the cycles from FROM to UNTIL seconds of the trace "
        "(a long trace's whole log runs to gigabytes)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _with_data(
    policies: list[tuple[str, QueuePolicy]], locality: str | None, cache_gb: float | None
) -> list[tuple[str, QueuePolicy]]:
    """``policies`` under ``--cache-gb``, and once per ``--locality`` setting."""
    out = []
    for name, policy in policies:
        data = policy.data if cache_gb is None else replace(policy.data, default_cache_gb=cache_gb)
        if locality is None:
            out.append((name, replace(policy, data=data)))
            continue
        for aware in (True, False):
            mode = "aware" if aware else "blind"
            if locality in (mode, "both"):
                label = f"{name}-{mode}" if locality == "both" else name
                out.append((label, replace(policy, data=replace(data, locality=aware))))
    return out


def _share(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {text}")
    return value


def _progress(enabled: bool, total: int, desc: str) -> tuple[Callable[[int], None] | None, Any]:
    if not enabled:
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit="job", file=sys.stderr, leave=False)
    return bar.update, bar


def _window(text: str) -> tuple[float, float]:
    """``--decisions-window FROM,UNTIL``: two times in seconds, FROM <= UNTIL."""
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not FROM,UNTIL in seconds") from None
    if not low <= high:
        raise argparse.ArgumentTypeError(f"{text!r}: FROM is after UNTIL")
    return low, high


def _within(write: CycleRecorder, window: tuple[float, float] | None) -> CycleRecorder:
    """``write`` for the cycles inside ``window`` (simulated seconds), every cycle without."""
    if window is None:
        return write
    low, high = window

    def record(cycle: int, wall_s: float, snapshot: Snapshot, plan: CyclePlan) -> None:
        if low <= snapshot.now_s <= high:
            write(cycle, wall_s, snapshot, plan)

    return record


def _decision_log(path: Path) -> DecisionLog:
    """A fresh decision log at ``path``, never rotated (a run's log is read whole)."""
    from cpn.decisions import DecisionLog

    path.unlink(missing_ok=True)
    # Always a file, even one named "-" (which DecisionLog reads as standard output, where
    # it would mix with --json's one document).
    return DecisionLog(str(path.absolute()), max_bytes=0, backups=0)


def _simulate(argv: Sequence[str]) -> int:
    args = _main_parser().parse_args(list(argv))
    from cpn.sim import report
    from cpn.sim.clusters import read_clusters
    from cpn.sim.records import SimResult
    from cpn.sim.runner import DEFAULT_ETA_MAX_CYCLES, resolve_policy, simulate
    from cpn.sim.trace import read_trace

    try:
        trace = read_trace(args.trace)
        clusters = read_clusters(args.clusters)
        specs = [s.strip() for s in args.policy.split(",") if s.strip()]
        if not specs:
            raise CpnError("--policy names no policy")
        if args.cache_gb is not None and not args.cache_gb >= 0:
            raise CpnError("--cache-gb must be at least 0")
        policies = _with_data([resolve_policy(s) for s in specs], args.locality, args.cache_gb)
    except (CpnError, KeyError, OSError) as exc:
        print(f"cpn simulate: {_message(exc)}", file=sys.stderr)
        return 2
    if args.decisions is not None and len(policies) != 1:
        print(
            "cpn simulate: --decisions records one policy's run: name one policy "
            "(and no --locality both, which runs it twice)",
            file=sys.stderr,
        )
        return 2
    if args.decisions_window is not None and args.decisions is None:
        print("cpn simulate: --decisions-window needs --decisions", file=sys.stderr)
        return 2
    max_cycles = args.eta_max_cycles or DEFAULT_ETA_MAX_CYCLES
    if max_cycles < 1 or args.eta_every < 1:
        print("cpn simulate: --eta-max-cycles and --eta-every must be at least 1", file=sys.stderr)
        return 2
    show = not args.json and not args.no_progress and sys.stderr.isatty() and len(trace) >= 200
    results: dict[str, SimResult] = {}
    log = _decision_log(args.decisions) if args.decisions is not None else None
    record = None if log is None else _within(log.write, args.decisions_window)
    for name, policy in policies:
        update, bar = _progress(show, len(trace), name)
        try:
            results[name] = simulate(
                trace,
                clusters,
                policy,
                name=name,
                estimator=args.estimator,
                sigma=args.sigma,
                seed=args.seed,
                tick_s=args.tick_s,
                progress=update,
                eta=args.eta,
                eta_max_cycles=max_cycles,
                eta_every=args.eta_every,
                eta_arrivals_s=args.eta_arrivals_h * 3600.0 if args.eta_arrivals_h else None,
                checkpointable=args.checkpointable,
                unlabelled=args.unlabelled,
                on_cycle=record,
            )
        except CpnError as exc:
            print(f"cpn simulate: {name}: {_message(exc)}", file=sys.stderr)
            return 2
        finally:
            if bar is not None:
                bar.close()
            if log is not None:
                log.close()
    rows = {name: report.metrics(result) for name, result in results.items()}
    if args.by_group:
        from cpn.sim.groups import by_group

        for name, result in results.items():
            rows[name]["by_group"] = by_group(result)
    etas: dict[str, dict[str, Any]] = {}
    if args.eta:
        from cpn.sim import eta_accuracy

        etas = {name: eta_accuracy.summary(result) for name, result in results.items()}
        for name, summary in etas.items():
            rows[name]["eta"] = summary
    for target in dict.fromkeys(d for d in (args.out, args.report) if d):
        _write_out(Path(target), results, rows)
    if args.report:
        path = report.write_markdown(
            args.report,
            rows,
            command=shlex.join(["cpn", "simulate", *argv]),
            trace=args.trace,
            clusters=args.clusters,
            policies={name: report.describe_policy(policy) for name, policy in policies},
            eta=etas or None,
        )
    if args.json:
        payload = next(iter(rows.values())) if len(rows) == 1 else rows
        print(json.dumps(payload, sort_keys=False))
    else:
        print(report.table(rows))
        if args.by_group:
            from cpn.sim.groups import table as group_table

            print("\nwaits by group (finished jobs):")
            print(group_table(rows))
        if etas:
            print("\nfirst ETA vs actual start (jobs that waited > 10 min):")
            print(report.eta_markdown_table(etas))
        if args.out:
            print(f"\nwrote metrics.json, jobs-*.csv and plots to {args.out}")
        if args.report:
            print(f"wrote {path}")
    return 0


def _write_out(out: Path, results: dict[str, Any], rows: dict[str, dict[str, Any]]) -> None:
    """metrics.json, a jobs CSV per policy and the plots (the ETA histogram with --eta)."""
    from cpn.sim import report

    out.mkdir(parents=True, exist_ok=True)
    for name, result in results.items():
        report.write_jobs_csv(result, out / f"jobs-{name}.csv")
    (out / "metrics.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    report.plot(results, out)
    if any(r.eta_max_cycles for r in results.values()):
        from cpn.sim import eta_accuracy

        eta_accuracy.plot_errors(results, out / "eta_error.png")


def _message(exc: BaseException) -> str:
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    return str(exc)


# --------------------------------------------------------------------------- convert


def _convert(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="cpn simulate convert", description="Convert public traces.")
    p.add_argument("format", choices=("gavel", "tiresias"))
    p.add_argument("files", nargs="+", help="Gavel .trace files, or Tiresias' 60_job.csv")
    p.add_argument("--out", required=True, help="gavel: a directory (<stem>.csv); tiresias: a file")
    p.add_argument("--reference-gpu", default="V100", help="GPU the durations are on (gavel)")
    args = p.parse_args(list(argv))
    from cpn.sim import trace

    try:
        if args.format == "gavel":
            out = Path(args.out)
            for name in args.files:
                jobs = trace.convert_gavel(name, reference_gpu=args.reference_gpu)
                target = out / f"{Path(name).stem}.csv"
                count = trace.write_trace(jobs, target)
                print(f"{name}: {count} jobs -> {target}")
        else:
            if len(args.files) != 1:
                p.error("tiresias takes exactly one file")
            jobs = trace.convert_tiresias(args.files[0])
            count = trace.write_trace(jobs, args.out)
            print(f"{args.files[0]}: {count} jobs -> {args.out}")
    except (CpnError, OSError, ValueError) as exc:
        print(f"cpn simulate convert: {_message(exc)}", file=sys.stderr)
        return 2
    return 0


def _generate(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="cpn simulate generate",
        description="Generate a synthetic trace (Poisson arrivals, benchmark-table job mix).",
    )
    p.add_argument("--jobs", type=int, required=True)
    p.add_argument("--rate-per-h", type=float, default=20.0, help="mean arrivals per hour")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reference-gpu", default="V100")
    p.add_argument("--users", type=int, default=8)
    p.add_argument("--groups", type=int, default=3)
    p.add_argument("--data-clusters", default="", help="comma-separated cluster names")
    p.add_argument("--out", required=True, help="trace CSV to write")
    args = p.parse_args(list(argv))
    from cpn.sim import trace

    return _write_trace(
        "generate",
        lambda: trace.generate(
            jobs=args.jobs,
            seed=args.seed,
            arrival_rate_per_h=args.rate_per_h,
            reference_gpu=args.reference_gpu,
            users=args.users,
            groups=args.groups,
            data_clusters=[c for c in args.data_clusters.split(",") if c],
        ),
        args.out,
    )


def _datasets(argv: Sequence[str]) -> int:
    from cpn.sim import datatrace as law

    p = argparse.ArgumentParser(
        prog="cpn simulate datasets",
        description="Give each job of a trace one dataset of its group (cpn.sim.datatrace's law).",
    )
    p.add_argument("--trace", required=True, help="trace CSV to read")
    p.add_argument("--clusters", required=True, help="cluster YAML: the datasets' homes")
    p.add_argument("--out", required=True, help="trace CSV to write")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--per-group", type=int, default=law.PER_GROUP, help="datasets per group")
    p.add_argument("--median-gb", type=float, default=law.MEDIAN_GB, help="median size (GB)")
    p.add_argument("--sigma", type=float, default=law.SIGMA, help="log-normal sigma of sizes")
    p.add_argument("--zipf", type=float, default=law.ZIPF_S, help="Zipf exponent of popularity")
    args = p.parse_args(list(argv))
    from cpn.sim.clusters import read_clusters
    from cpn.sim.trace import read_trace

    def make() -> list[TraceJob]:
        return law.with_datasets(
            read_trace(args.trace),
            [c.name for c in read_clusters(args.clusters).clusters],
            seed=args.seed,
            per_group=args.per_group,
            median_gb=args.median_gb,
            sigma=args.sigma,
            zipf_s=args.zipf,
        )

    return _write_trace("datasets", make, args.out)


def _write_trace(command: str, make: Callable[[], Sequence[TraceJob]], out: str) -> int:
    """Write the trace ``make`` makes to ``out``; 2 with one line when it cannot."""
    from cpn.sim.trace import write_trace

    try:
        count = write_trace(make(), out)
    except (CpnError, OSError, ValueError) as exc:
        print(f"cpn simulate {command}: {_message(exc)}", file=sys.stderr)
        return 2
    print(f"{count} jobs -> {out}")
    return 0


def main(argv: list[str]) -> int:
    """Entry point of ``cpn simulate`` (see the module docstring)."""
    if argv and argv[0] == "convert":
        return _convert(argv[1:])
    if argv and argv[0] == "generate":
        return _generate(argv[1:])
    if argv and argv[0] == "datasets":
        return _datasets(argv[1:])
    if argv and argv[0] == "philly":
        from cpn.sim.compare import main as philly

        return philly(argv[1:])
    return _simulate(argv)
