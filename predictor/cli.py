"""``cpn predictor``: train, query and evaluate the runtime predictor.

::

    cpn predictor train --benchmarks F.csv [--history DB] [--family rf] --out ARTIFACT
    cpn predictor predict --model resnet50 --gpu-type A100-80GB --batch-size 256 \\
        --samples 1281167 --epochs 90 [--gpus 1] [--artifact ARTIFACT] [--json]
    cpn predictor evaluate [--benchmarks F.csv] (--holdout-gpu TYPE [--given-models M1,M2] |
        --holdout-model NAME) [--model-family rf|hgb|xgb|scaling] [--json]
    cpn predictor screen [--benchmarks F.csv] [--json]

Every command trains on the shipped tables (Gavel's and Lambda's), plus ``--benchmarks``
when given (``--without-shipped``: that file alone), after the absurd-row rule
(:mod:`predictor.knowledge`); ``screen`` prints the rule and what it rejected.

Exit codes: 0 success, 2 bad arguments or input (the message says which).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from predictor.artifacts import load as load_artifact
from predictor.artifacts import save as save_artifact
from predictor.benchmarks import BenchmarkError, BenchmarkTable
from predictor.catalog import UnknownName, canonical_gpu, gpu_key, gpu_types
from predictor.evaluation import evaluate
from predictor.file_precision import Inferred, infer_precision, with_precision
from predictor.knowledge import (
    COLLAPSE,
    RULE,
    SUPERLINEAR,
    Rejected,
    screened,
    shipped,
    with_shipped,
)
from predictor.measurements import Measurement, Query, measurements_from_table
from predictor.model import FAMILIES, ThroughputModel


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cpn predictor", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="fit the model on benchmarks (and history)")
    train.add_argument("--benchmarks", type=Path, help="benchmark CSV, added to the shipped tables")
    train.add_argument("--without-shipped", action="store_true", help="--benchmarks alone")
    train.add_argument("--history", type=Path, help="SQLite history of finished jobs")
    train.add_argument("--family", "--model-family", choices=FAMILIES, default="rf")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--out", type=Path, required=True, help="artifact path (joblib)")

    predict = sub.add_parser("predict", help="runtime of one job on one or every GPU type")
    predict.add_argument("--model", required=True)
    predict.add_argument("--gpu-type", help="one GPU type (default: every catalog type)")
    predict.add_argument("--batch-size", type=int, required=True)
    predict.add_argument("--samples", type=float, help="dataset samples per epoch")
    predict.add_argument("--epochs", type=float, default=1.0)
    predict.add_argument("--steps", type=float, help="steps (batches of one worker)")
    predict.add_argument("--gpus", type=int, default=1)
    predict.add_argument("--precision", default="", help="fp32, mixed, ... (default: unknown)")
    predict.add_argument("--artifact", type=Path, help="trained artifact (default: train now)")
    predict.add_argument("--json", action="store_true")

    ev = sub.add_parser("evaluate", help="hold out a GPU type or a model; score the rest")
    ev.add_argument(
        "--benchmarks",
        type=Path,
        help="benchmark CSV added to the shipped tables; only its rows are scored",
    )
    ev.add_argument("--without-shipped", action="store_true", help="--benchmarks alone")
    hold = ev.add_mutually_exclusive_group(required=True)
    hold.add_argument("--holdout-gpu")
    hold.add_argument("--holdout-model")
    ev.add_argument(
        "--given-models",
        default="",
        metavar="M1,M2",
        help="with --holdout-gpu: the held-out type's rows of these models go to training "
        "(as a benchmark run would) and only the other models' rows are scored",
    )
    ev.add_argument("--model-family", "--family", choices=FAMILIES, default="rf")
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument(
        "--no-calibrate",
        action="store_true",
        help="apply the learned residual in full (skip the inner-CV weight)",
    )
    ev.add_argument(
        "--observe-per-model",
        type=int,
        default=0,
        metavar="K",
        help="with --holdout-gpu: let the online estimator observe K held-out jobs per "
        "model first, and score the rest",
    )
    ev.add_argument("--json", action="store_true")

    sc = sub.add_parser("screen", help="the absurd-row rule and the rows it rejects")
    sc.add_argument("--benchmarks", type=Path, help="benchmark CSV, added to the shipped tables")
    sc.add_argument("--without-shipped", action="store_true", help="--benchmarks alone")
    sc.add_argument("--json", action="store_true")
    return parser


def _tables(
    args: argparse.Namespace,
    exclude_gpu: str | None = None,
    exclude_model: str | None = None,
    *,
    infer: bool = True,
) -> tuple[BenchmarkTable, list[Rejected], BenchmarkTable | None, Inferred | None]:
    """(screened training table, rejected rows, the --benchmarks file's own table, the
    precision inferred for its rows that state none: :mod:`predictor.file_precision`,
    judged without the held-out type's or model's rows; None without a file, with
    --without-shipped or not ``infer``)."""
    own = None
    if args.benchmarks is not None:
        own = BenchmarkTable.load(args.benchmarks, skip_unknown_gpus=True)
        _check_skipped(args, own.skipped, exclude_gpu)
    inferred = None
    if args.without_shipped:
        if own is None:
            raise ValueError("--without-shipped needs --benchmarks")
        table, rejected = screened(own)
    else:
        if own is not None and infer:
            gpu = own.resolve_gpu(exclude_gpu) if exclude_gpu else None
            model = own.resolve_model(exclude_model) if exclude_model else None
            inferred = infer_precision(own, shipped(), exclude_gpu=gpu, exclude_model=model)
            own = with_precision(own, inferred.precision)
        table, rejected = with_shipped(own)
    return table, rejected, own, inferred


def _check_skipped(
    args: argparse.Namespace, skipped: Sequence[tuple[str, str]], holdout_gpu: str | None
) -> None:
    """Rows of GPU types the catalog lacks are left out with a warning on stderr (the rest
    of the file still trains and scores); holding out such a type is an error."""
    if not skipped:
        return
    names = sorted({name for _, name in skipped})
    if holdout_gpu is not None and gpu_key(holdout_gpu) in {gpu_key(n) for n in names}:
        raise ValueError(
            f"--holdout-gpu {holdout_gpu!r} is not in the GPU catalog: add it to "
            "predictor/data/gpus.yaml or give its rows fp32_tflops, bandwidth_gbs and "
            "memory_gib columns"
        )
    print(
        f"cpn predictor {args.command}: left out {len(skipped)} row(s) of GPU types the "
        f"catalog lacks: {', '.join(names)} (first: {skipped[0][0]}); add them to "
        "predictor/data/gpus.yaml or give fp32_tflops, bandwidth_gbs, memory_gib columns",
        file=sys.stderr,
    )


def _skipped_report(own: BenchmarkTable | None) -> dict[str, object]:
    """What ``--json`` says of the rows left out for an unknown GPU type."""
    skipped = own.skipped if own is not None else ()
    return {
        "skipped_rows": len(skipped),
        "unknown_gpu_types": sorted({name for _, name in skipped}),
    }


def _train(args: argparse.Namespace) -> int:
    table, _, own, _ = _tables(args)
    measurements = measurements_from_table(table)
    if args.history is not None:
        measurements += _history_measurements(args.history)
    model = ThroughputModel(args.family, seed=args.seed).fit(measurements, table=table)
    save_artifact(model, args.out)
    print(
        json.dumps(
            {
                "out": str(args.out),
                "family": model.family,
                "rows": len(measurements),
                "shrink": model.shrink,
                "imputed_models": list(table.imputed_models),
                **_skipped_report(own),
            }
        )
    )
    return 0


def _history_measurements(path: Path) -> list[Measurement]:
    """Median observed throughput per key from a history database."""
    from predictor.history import History, measurements_from_history

    if not path.exists():
        raise FileNotFoundError(f"{path}: no such history database")
    history = History(path)
    try:
        return measurements_from_history(history.iter_records())
    finally:
        history.close()


def _predict(args: argparse.Namespace) -> int:
    if args.artifact is not None:
        model = load_artifact(args.artifact)
    else:
        table = shipped()
        model = ThroughputModel("rf").fit(measurements_from_table(table), table=table)
    try:
        name = model.specs.table.resolve_model(args.model)
        known = True
    except UnknownName:
        name, known = args.model.strip().lower(), False
    types = [canonical_gpu(args.gpu_type)] if args.gpu_type else list(gpu_types())
    if args.samples is not None:
        work = args.samples * args.epochs
    elif args.steps is not None:
        work = args.steps * args.batch_size
    else:
        raise ValueError("give --samples (and --epochs) or --steps")
    queries = [
        Query(
            model=name,
            gpu_type=g,
            batch_size=args.batch_size,
            gpus=args.gpus,
            precision=args.precision,
        )
        for g in types
    ]
    pred = model.predict(queries)
    unseen = not known or name not in {m.model for m in model.measurements}
    results = []
    for i, gpu in enumerate(types):
        point, low = float(pred.samples_per_s[i]), float(pred.low_sps[i])
        runtime, high = work / point, work / low
        if unseen:  # conservative: the high quantile, as the online estimator does
            runtime, high = high, high * high / runtime
        results.append(
            {
                "gpu_type": gpu,
                "samples_per_s": round(point, 3),
                "runtime_s": round(runtime, 1),
                "high_s": round(high, 1),
                "source": pred.kind[i],
            }
        )
    if args.json:
        print(json.dumps({"model": name, "unseen": unseen, "predictions": results}))
    else:
        flag = " (unseen: conservative)" if unseen else ""
        print(f"{name}{flag}, batch {args.batch_size}, {args.gpus} GPU(s), {work:g} samples")
        for r in results:
            print(
                f"  {r['gpu_type']:<12} {r['runtime_s'] / 3600:9.2f} h "
                f"(90%: {r['high_s'] / 3600:.2f} h)  {r['samples_per_s']:>10} samples/s"
                f"  [{r['source']}]"
            )
    return 0


def _screen(args: argparse.Namespace) -> int:
    table, rejected, own, _ = _tables(args, infer=False)
    report = {
        **_skipped_report(own),
        "rule": RULE,
        "superlinear_factor": SUPERLINEAR,
        "collapse_factor": COLLAPSE,
        "sources": table.source,
        "rows_kept": len(table.rows),
        "rows_rejected": len(rejected),
        "rejected": [r.as_dict() for r in rejected],
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print(RULE)
    print(f"{len(table.rows)} rows kept, {len(rejected)} rejected ({table.source})")
    for r in rejected:
        row = r.row
        print(
            f"  {r.check:<12} x{r.ratio:<8.3g} {row.model} on {row.gpus} x {row.gpu_type} "
            f"{row.precision} batch {row.batch_size}: {row.samples_per_s:g} samples/s "
            f"vs one GPU {r.reference_sps:g}  [{row.origin}]"
        )
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    table, rejected, own, inferred = _tables(args, args.holdout_gpu, args.holdout_model)
    measurements = measurements_from_table(table)
    holdout_gpu = table.resolve_gpu(args.holdout_gpu) if args.holdout_gpu else None
    holdout_model = table.resolve_model(args.holdout_model) if args.holdout_model else None
    given = sorted({table.resolve_model(m) for m in args.given_models.split(",") if m.strip()})
    if given and holdout_gpu is None:
        raise ValueError("--given-models needs --holdout-gpu")
    scored = None
    if own is not None and not args.without_shipped:  # score the file's own rows only
        kept = set(table.rows)
        scored = measurements_from_table(
            BenchmarkTable([r for r in own.rows if r in kept], source=own.source)
        )
    if args.observe_per_model:
        if holdout_gpu is None:
            raise ValueError("--observe-per-model needs --holdout-gpu")
        from predictor.evaluation import evaluate_with_observations

        online = evaluate_with_observations(
            table,
            holdout_gpu,
            per_model=args.observe_per_model,
            family=args.model_family,
            seed=args.seed,
        )
        print(json.dumps(online) if args.json else f"after observing: {online}")
        return 0
    result: dict[str, object] = dict(
        evaluate(
            measurements,
            family=args.model_family,
            holdout_gpu=holdout_gpu,
            holdout_model=holdout_model,
            table=table,
            seed=args.seed,
            calibrate=not args.no_calibrate,
            given_models=given,
            scored=scored,
        )
    )
    result.update(
        holdout_gpu=holdout_gpu,
        holdout_model=holdout_model,
        given_models=given,
        given_rows=sum(1 for m in measurements if m.gpu_type == holdout_gpu and m.model in given),
        family=args.model_family,
        sources=table.source,
        rows_rejected=len(rejected),
        imputed_models=list(table.imputed_models),
        **_skipped_report(own),
    )
    if inferred is not None:
        result.update(
            inferred_precision=inferred.precision or "unknown",
            precision_errors={p or "unknown": round(e, 4) for p, e in inferred.errors.items()},
            precision_judged_rows=inferred.rows,
        )
    if args.json:
        print(json.dumps(result))
    else:
        held = holdout_gpu or holdout_model
        with_given = f" given {','.join(given)} ({result['given_rows']} rows)" if given else ""
        print(
            f"{args.model_family} holding out {held}{with_given}: n={result['n']} "
            f"MAPE={result['mape']}% median APE={result['median_ape']}%"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``cpn predictor``."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        if args.command == "train":
            return _train(args)
        if args.command == "predict":
            return _predict(args)
        if args.command == "screen":
            return _screen(args)
        return _evaluate(args)
    except (BenchmarkError, UnknownName, ValueError, FileNotFoundError) as exc:
        print(f"cpn predictor {args.command}: {exc}", file=sys.stderr)
        return 2
