"""Scoring 10,000 jobs with a priority formula: cpn's own evaluator against CEL libraries.

The aim (issue 18): a formula engine must score 10,000 jobs in under 100 ms. For each engine
and each formula this compiles once (timed apart, cpn's cache bypassed), then scores batches of
``--rows`` jobs from the same factor columns the queue builds, and reports p50/p99 per batch.

Engines:

- ``cpn``: :mod:`cpn.core.formula`, compiled to numpy operations, all jobs in one call.
- ``common-expression-language`` (import ``cel``, Rust), ``cel-expr-python`` (import
  ``cel_expr_python``, Google's C++ CEL) and ``cel-python`` (import ``celpy``, pure Python):
  compiled once, evaluated once per job (none of them evaluates over arrays). Each job's
  inputs are a dict of only the factors the formula reads (their best case), and the timing
  includes building those dicts from the columns and collecting the scores into an array, the
  work the queue would do. ``min``, ``max``, ``clamp``, ``log1p`` and ``sqrt`` (cpn's
  functions, absent from standard CEL) are registered as Python functions.
- ``cel-expr-python-restricted``: the same with the macros and string functions excluded and a
  double result required: the configuration that makes that library safe (see ``probes``).

The formulas are typed as strict CEL needs them (double literals, a comparison where a
condition is wanted), so every engine runs the same text and the scores are compared with cpn's
(``agrees``). ``one-factor`` is the cost of a call itself; ``long-native`` is ``long`` with
the function calls written as conditionals: the CEL libraries' best case. ``probes`` tells
what each engine does with texts outside cpn's numeric language. A library that is not
installed is reported as such; install them with ``pip install -e '.[formula-bench]'``.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from cpn.core.formula import FACTORS, _compile

Vector = npt.NDArray[np.float64]
Scorer = Callable[[Mapping[str, Vector]], Vector]
Runner = Callable[[dict[str, float]], Any]

#: Formulas by name, in strict CEL (which cpn's language also reads, with the same meaning).
FORMULAS: Mapping[str, str] = {
    "one-factor": "gpus",  # the cost of a call itself
    "default": "1000000.0 * priority + aging * wait_s - gpu_time_s",
    "long": (
        "1000000.0 * priority + 1000.0 * (user_level + group_level)"
        " + aging * wait_s"
        " - (unseen != 0.0 ? 1.5 : 1.0) * runtime_s / max(1.0, log1p(gpus))"
        " - 0.1 * service_s / 3600.0"
        " - 1000.0 * clamp(quota_used, 0.0, 1.0)"
        " + (attempts > 0.0 && wait_s > 3600.0 ? 500.0 : 0.0)"
        " - sqrt(gpu_time_s) + min(user_estimate_s, runtime_s) / 1000.0"
    ),
    "long-native": (
        "1000000.0 * priority + 1000.0 * (user_level + group_level)"
        " + aging * wait_s"
        " - (unseen != 0.0 ? 1.5 : 1.0) * runtime_s / (gpus > 1.0 ? gpus : 1.0)"
        " - 0.1 * service_s / 3600.0"
        " - 1000.0 * (quota_used < 0.0 ? 0.0 : (quota_used > 1.0 ? 1.0 : quota_used))"
        " + (attempts > 0.0 && wait_s > 3600.0 ? 500.0 : 0.0)"
        " - gpu_time_s / 3600.0"
        " + (user_estimate_s < runtime_s ? user_estimate_s : runtime_s) / 1000.0"
    ),
}

#: cpn's functions that standard CEL lacks, for the libraries (all arguments doubles).
EXTRA_FUNCTIONS: Mapping[str, Callable[..., float]] = {
    "min": min,
    "max": max,
    "clamp": lambda x, low, high: min(max(x, low), high),
    "log1p": math.log1p,
    "sqrt": math.sqrt,
}
ARITY = {"min": 2, "max": 2, "clamp": 3, "log1p": 1, "sqrt": 1}

#: engine name -> the module it imports
LIBRARIES = {
    "common-expression-language": "cel",
    "cel-expr-python": "cel_expr_python",
    "cel-expr-python-restricted": "cel_expr_python",
    "cel-python": "celpy",
}


def columns(rows: int, seed: int) -> dict[str, Vector]:
    """Plausible factor values for ``rows`` pending jobs."""
    rng = np.random.default_rng(seed)
    gpus = rng.choice([1.0, 2.0, 4.0, 8.0, 16.0, 32.0], size=rows)
    runtime = rng.lognormal(mean=8.0, sigma=1.5, size=rows)
    cols = {name: np.zeros(rows) for name in FACTORS}
    cols.update(
        priority=rng.integers(0, 3, size=rows).astype(np.float64),
        gpus=gpus,
        size=gpus,
        workers=np.ceil(gpus / 8),
        runtime_s=runtime,
        gpu_time_s=gpus * runtime,
        wait_s=rng.exponential(3600.0, size=rows),
        service_s=rng.exponential(600.0, size=rows),
        quota_used=rng.uniform(0.0, 1.2, size=rows),
        user_level=rng.integers(0, 3, size=rows).astype(np.float64),
        group_level=rng.integers(0, 2, size=rows).astype(np.float64),
        user_estimate_s=np.where(rng.uniform(size=rows) < 0.5, 0.0, runtime * 1.3),
        attempts=rng.integers(0, 2, size=rows).astype(np.float64),
        unseen=(rng.uniform(size=rows) < 0.1).astype(np.float64),
        aging=np.full(rows, 4.0),
    )
    return cols


def _per_job(names: list[str], run: Callable[[dict[str, float]], Any]) -> Scorer:
    """A scorer that builds one dict per job from the columns and calls ``run`` on each."""

    def score(cols: Mapping[str, Vector]) -> Vector:
        rows = zip(*(cols[name].tolist() for name in names), strict=True)
        return np.fromiter(
            (run(dict(zip(names, row, strict=True))) for row in rows), dtype=np.float64
        )

    return score


def _cpn(text: str, names: list[str]) -> Runner:
    formula = _compile.__wrapped__(text)
    return lambda row: float(formula.evaluate(row)[0])


def _rust(text: str, names: list[str]) -> Runner:
    import cel

    program = cel.compile(text)
    if not set(program.functions()) & EXTRA_FUNCTIONS.keys():
        return program.execute  # a plain dict is its fastest input
    context = cel.Context(functions=dict(EXTRA_FUNCTIONS))

    def run(row: dict[str, float]) -> Any:
        context.update(row)
        return program.execute(context)

    return run


def _cpp(text: str, names: list[str], config: Any = None) -> Runner:
    from cel_expr_python import cel

    double = cel.Type.DOUBLE
    decls = [
        cel.FunctionDecl(
            name, [cel.Overload(f"{name}_double", double, [double] * ARITY[name], impl=fn)]
        )
        for name, fn in EXTRA_FUNCTIONS.items()
    ]
    env = cel.NewEnv(config=config, variables=dict.fromkeys(names, double), functions=decls)
    expression = env.compile(text)
    if config is not None and expression.return_type() != double:
        raise ValueError(f"the result is {expression.return_type().name()}, not a double")
    return lambda row: expression.eval(data=row).value()


#: cel-expr-python's standard library without the macros and the string functions
_RESTRICTED = """
stdlib:
  exclude_macros: [map, filter, all, exists, exists_one, has]
  exclude_functions:
    - name: size
    - name: matches
    - name: contains
    - name: startsWith
    - name: endsWith
"""


def _cpp_restricted(text: str, names: list[str]) -> Runner:
    """cel-expr-python made safe: no macros or string functions, and the result a double (the
    type checker then refuses strings, lists and maps as the result, attribute access and
    mixed types; what is left is bounded by the text's length)."""
    from cel_expr_python import cel

    return _cpp(text, names, cel.NewEnvConfigFromYaml(_RESTRICTED))


def _celpy(text: str, names: list[str]) -> Runner:
    import celpy
    from celpy import celtypes

    def wrap(fn: Callable[..., float]) -> Callable[..., Any]:
        return lambda *args: celtypes.DoubleType(fn(*(float(a) for a in args)))

    env = celpy.Environment()
    program = env.program(
        env.compile(text), functions={n: wrap(f) for n, f in EXTRA_FUNCTIONS.items()}
    )
    return lambda row: program.evaluate({k: celtypes.DoubleType(v) for k, v in row.items()})


#: engine -> (text, factor names) -> a function scoring one job
RUNNERS: Mapping[str, Callable[[str, list[str]], Runner]] = {
    "cpn": _cpn,
    "common-expression-language": _rust,
    "cel-expr-python": _cpp,
    "cel-expr-python-restricted": _cpp_restricted,
    "cel-python": _celpy,
}
ENGINES = tuple(RUNNERS)


def scorer(engine: str, text: str, names: list[str]) -> Scorer:
    """Compile ``text`` with ``engine`` (cpn's cache bypassed) into a function of the columns."""
    if engine == "cpn":
        return _compile.__wrapped__(text).evaluate
    return _per_job(names, RUNNERS[engine](text, names))


def _timed(score: Scorer, cols: Mapping[str, Vector]) -> tuple[float, float, Vector]:
    """Wall and CPU milliseconds of one batch (CPU time: what the batch itself used, less
    affected by other work on a shared machine), and its scores."""
    wall, cpu = time.perf_counter(), time.process_time()
    scores = score(cols)
    return (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000, scores


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2)


def measure(
    engine: str, text: str, cols: Mapping[str, Vector], repeats: int, budget_s: float
) -> dict[str, Any]:
    """Compile ``text`` with ``engine`` and time batches until ``repeats`` or ``budget_s``."""
    module = LIBRARIES.get(engine)
    if module is not None and importlib.util.find_spec(module) is None:
        return {"error": f"not installed ({engine})"}
    names = sorted(_compile.__wrapped__(text).names)
    if module is not None:
        importlib.import_module(module)  # not part of the compile time
    start = time.perf_counter()
    score = scorer(engine, text, names)
    compile_ms = (time.perf_counter() - start) * 1000
    first_ms, first_cpu_ms, scores = _timed(score, cols)  # warm-up, and the scores to compare
    times: list[float] = []
    cpu_times: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(times) < repeats and (len(times) < 3 or time.perf_counter() < deadline):
        if first_ms > budget_s * 1000:  # one batch takes longer than the budget: report it
            times.append(first_ms)
            cpu_times.append(first_cpu_ms)
            break
        wall_ms, cpu_ms, _ = _timed(score, cols)
        times.append(wall_ms)
        cpu_times.append(cpu_ms)
    reference = _compile.__wrapped__(text).evaluate(cols)
    return {
        "compile_ms": round(compile_ms, 3),
        "repeats": len(times),
        "p50_ms": round(statistics.median(times), 2),
        "p99_ms": _p99(times),
        "cpu_p50_ms": round(statistics.median(cpu_times), 2),
        "cpu_p99_ms": _p99(cpu_times),
        "us_per_job_p50": round(statistics.median(times) * 1000 / max(1, len(scores)), 3),
        "finite": bool(np.isfinite(scores).all()),
        "agrees": bool(np.allclose(scores, reference, rtol=1e-9, atol=1e-6)),
    }


#: Texts outside cpn's numeric language: what does each engine do with them?
PROBES: Mapping[str, str] = {
    "string": "'a' + 'b'",
    "list-macro": "[1.0, 2.0].map(x, x * gpus)",
    "nested-macros": "[1, 2, 3].map(x, [1, 2, 3].map(y, x * y))",
    "attribute": "gpus.count",
    "regex": "'aaa'.matches('a+')",
    "int-times-double": "1000000 * priority",
    "int-division": "7 / 2",
}


def probe(engine: str) -> dict[str, str]:
    """Compile each probe (factors declared as doubles) and run it on one job of ones."""
    module = LIBRARIES.get(engine)
    if module is not None and importlib.util.find_spec(module) is None:
        return {"error": f"not installed ({engine})"}
    names = sorted(FACTORS)
    outcome: dict[str, str] = {}
    for label, text in PROBES.items():
        try:
            run = RUNNERS[engine](text, names)
        except Exception as error:  # each engine raises its own types
            outcome[label] = f"refused at compile: {str(error).splitlines()[0][:100]}"
            continue
        try:
            value = run(dict.fromkeys(names, 1.0))
        except Exception as error:
            outcome[label] = f"error when run: {type(error).__name__}: {str(error)[:60]}"
            continue
        outcome[label] = f"runs: {value!r}"[:100]
    return outcome


def main(argv: list[str]) -> int:
    """Run the benchmark and print its JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--budget-s", type=float, default=5.0, help="per engine and formula")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--formulas", default=",".join(FORMULAS))
    args = parser.parse_args(argv)

    cols = columns(args.rows, args.seed)
    results: dict[str, dict[str, Any]] = {}
    for formula in args.formulas.split(","):
        for engine in args.engines.split(","):
            key = f"{engine}/{formula}"
            results[key] = measure(engine, FORMULAS[formula], cols, args.repeats, args.budget_s)
    probes = {engine: probe(engine) for engine in args.engines.split(",")}
    result = {
        "bench": "formula",
        "rows": args.rows,
        "target_p99_ms": 100.0,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "results": results,
        "meets_target": sorted(
            key for key, r in results.items() if r.get("p99_ms", math.inf) < 100.0
        ),
        "probes": probes,
        "meets_target_in_cpu_time": sorted(
            key for key, r in results.items() if r.get("cpu_p99_ms", math.inf) < 100.0
        ),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
