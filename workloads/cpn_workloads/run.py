"""Measure training throughput (`bench`) or train for a while (`train`); print one JSON document.

    python -m cpn_workloads bench [--models resnet50,yolov8m,llama3] [--budget-seconds 300]
    python -m cpn_workloads train --model resnet50 [--seconds 600 | --steps 1000]

The document goes to stdout and, where it can, to the container's termination message
(/dev/termination-log, at most 4096 bytes), the Kubernetes way to hand a small result back.
Logs go to stderr. Exit status: 0 when every model ran, 1 when one failed (the document says
which and why), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import signal
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch

from cpn_workloads import __version__
from cpn_workloads.models import MODELS, Workload, build, default_batch

TERMINATION_LOG = Path("/dev/termination-log")
TERMINATION_LIMIT = 4096  # bytes Kubernetes keeps of a termination message
DEFAULT_MODELS = ("resnet50", "yolov8m", "llama3")


def log(msg: str) -> None:
    print(f"cpn-workloads: {msg}", file=sys.stderr, flush=True)


def pick_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def pick_precision(device: torch.device, requested: str) -> str:
    """bf16 autocast where the GPU has it, else fp16 with loss scaling; fp32 on a CPU."""
    if requested != "auto":
        return requested
    if device.type != "cuda":
        return "fp32"
    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


def device_info(device: torch.device) -> dict[str, Any]:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return {
            "type": "cuda",
            "name": props.name,
            "memory_gib": round(props.total_memory / 2**30, 1),
            "capability": f"{props.major}.{props.minor}",
            "count": torch.cuda.device_count(),
        }
    return {
        "type": device.type,
        "name": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
    }


def software() -> dict[str, Any]:
    import torchvision  # type: ignore[import-untyped]
    import transformers

    return {
        "workload": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "cudnn": (
            torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
            if torch.backends.cudnn.is_available()  # type: ignore[no-untyped-call]
            else None
        ),
    }


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def trainer(w: Workload, device: torch.device, precision: str) -> tuple[Callable[[], float], Any]:
    """One training step as a function, and its optimizer (SGD for CNNs, AdamW for transformers)."""
    params = w.model.parameters()
    transformer = "seq" in w.shape
    opt: torch.optim.Optimizer = (
        torch.optim.AdamW(params, lr=1e-5)
        if transformer
        else torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    )
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    w.model.train()

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = w.loss(w.model, w.batch)
        scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
        scaler.step(opt)
        scaler.update()
        return float(loss.detach())  # waits for the step, so its time is measured whole

    return step, opt


def quantile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[round(q * 100) - 1]


def build_fitting(
    name: str,
    device: torch.device,
    tiny: bool,
    batch: int | None,
    wrap: Callable[[torch.nn.Module], torch.nn.Module] | None = None,
) -> tuple[Workload, Callable[[], float], Any]:
    """Build the model and run one step; on out-of-memory halve the batch, then (for the
    Llama-3 shape at batch 1) the number of layers, until it fits."""
    batch = batch or default_batch(name, tiny)
    max_layers: int | None = None
    while True:
        w = step = opt = None
        try:
            w = build(name, device, tiny, batch, max_layers)
            if wrap is not None:
                w.model = wrap(w.model)
            step, opt = trainer(w, device, PRECISION[0])
            step()
            return w, step, opt
        except torch.OutOfMemoryError:
            layers = w.shape.get("layers") if w is not None else max_layers
            del w, step, opt
            torch.cuda.empty_cache()
            if batch > 1:
                log(f"{name}: out of memory at batch {batch}; trying {batch // 2}")
                batch //= 2
            elif name == "llama3" and not tiny and (layers or 32) > 1:
                max_layers = (layers or 32) // 2
                log(f"{name}: out of memory at batch 1; trying {max_layers} layers")
            else:
                raise


PRECISION = ["fp32"]  # chosen once in main(); a list so build_fitting sees main's choice


def bench_one(name: str, device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(0)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    w, step, _ = build_fitting(name, device, args.tiny, args.batch_size)
    for _ in range(max(args.warmup - 1, 0)):  # build_fitting ran the first warm-up step
        step()
    times: list[float] = []
    while True:
        t0 = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - t0)
        spent = time.perf_counter() - start
        if len(times) >= args.max_steps or (
            len(times) >= args.min_steps and spent >= args.budget_seconds
        ):
            break
    result: dict[str, Any] = {
        "model": name,
        "shape": w.shape,
        "params": w.params(),
        "batch_size": w.batch_size,
        "precision": PRECISION[0],
        "warmup_steps": max(args.warmup, 1),
        "steps": len(times),
        "samples_per_s": round(w.batch_size * len(times) / sum(times), 3),
        "step_s": {"p50": round(quantile(times, 0.5), 5), "p90": round(quantile(times, 0.9), 5)},
        "seconds": round(time.perf_counter() - start, 1),
    }
    if device.type == "cuda":
        result["peak_mem_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    log(f"{name}: {result['samples_per_s']} samples/s at batch {w.batch_size} ({len(times)} steps)")
    return result


def world() -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun sets them; (0, 1, 0) when run alone."""
    env = os.environ
    return (
        int(env.get("RANK", "0")),
        int(env.get("WORLD_SIZE", "1")),
        int(env.get("LOCAL_RANK", "0")),
    )


def train(device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    """Train `args.model` to --steps (resumed ones count) or for --seconds; checkpoint if asked.

    Under torchrun (WORLD_SIZE > 1) every process trains its own GPU's copy, wrapped in
    DistributedDataParallel; --batch-size is per process; rank 0 alone saves checkpoints and
    reports. The processes agree after every step whether to stop, so none waits forever.
    """
    torch.manual_seed(0)
    rank, size, _ = world()
    wrap = None
    if size > 1:
        from torch.nn.parallel import DistributedDataParallel

        def wrap(m: torch.nn.Module) -> torch.nn.Module:
            ids = [device.index] if device.type == "cuda" else None
            return DistributedDataParallel(m, device_ids=ids)

    w, step, opt = build_fitting(args.model, device, args.tiny, args.batch_size, wrap)
    bare = cast(torch.nn.Module, w.model.module) if size > 1 else w.model
    ckdir = os.environ.get("CPN_CHECKPOINT_DIR")
    ckpt = Path(ckdir) / f"{args.model}.pt" if ckdir else None
    done = 1  # build_fitting ran one step
    start_step = 0
    if ckpt is not None and ckpt.exists():
        state = torch.load(ckpt, map_location=device, weights_only=True)
        bare.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start_step = int(state["step"])
        done = 0  # the probe step above was on fresh weights: not counted
        log(f"resumed {args.model} from {ckpt} at step {start_step}")
    stop = {"signal": False}

    def on_term(signum: int, _frame: object) -> None:
        stop["signal"] = True

    signal.signal(signal.SIGTERM, on_term)
    saved = 0

    def save() -> None:
        nonlocal saved
        if ckpt is None or rank != 0:
            return
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        tmp = ckpt.with_suffix(".tmp")
        state = {
            "model": bare.state_dict(),
            "optimizer": opt.state_dict(),
            "step": start_step + done,
        }
        torch.save(state, tmp)
        tmp.replace(ckpt)  # atomic: a preempted save leaves the previous checkpoint whole
        saved += 1

    def should_stop() -> str | None:
        reason = None
        if args.steps is not None and start_step + done >= args.steps:
            reason = "steps"
        elif args.seconds is not None and time.perf_counter() - t_start >= args.seconds:
            reason = "time"
        elif stop["signal"]:
            reason = "signal"
        if size > 1:  # stop together: the largest code any process has (0 = go on)
            codes = [None, "steps", "time", "signal"]
            flag = torch.tensor([codes.index(reason)], device=device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            reason = codes[int(flag.item())]
        return reason

    log(f"training {args.model} from step {start_step + done}")
    t_start = last_save = time.perf_counter()
    loss = float("nan")
    while (reason := should_stop()) is None:
        loss = step()
        done += 1
        if ckpt is not None and time.perf_counter() - last_save >= args.checkpoint_every:
            save()
            last_save = time.perf_counter()
    sync(device)
    elapsed = time.perf_counter() - t_start
    save()
    return {
        "kind": "cpn.io/training-run",
        "model": args.model,
        "shape": w.shape,
        "batch_size": w.batch_size,
        "world_size": size,
        "precision": PRECISION[0],
        "start_step": start_step,
        "steps": start_step + done,
        "stopped_by": reason,
        "loss": round(loss, 4) if loss == loss else None,
        "samples_per_s": round(w.batch_size * size * done / elapsed, 3) if elapsed > 0 else None,
        "checkpoints_written": saved,
        "checkpoint": str(ckpt) if ckpt else None,
    }


def compact(doc: dict[str, Any]) -> dict[str, Any]:
    """The same result without shapes and minor fields, for a termination message over 4 KiB."""
    keep = ("model", "batch_size", "precision", "samples_per_s", "step_s", "error")
    small: dict[str, Any] = {k: doc[k] for k in ("kind", "schema", "mode") if k in doc}
    small["device"] = {k: v for k, v in doc["device"].items() if k in ("name", "memory_gib")}
    small["software"] = {"torch": doc["software"]["torch"], "workload": __version__}
    small["results"] = [{k: r[k] for k in keep if k in r} for r in doc.get("results", [])]
    small["truncated"] = True
    return small


def write_termination(doc: dict[str, Any], path: Path, explicit: bool) -> None:
    """Write the result where Kubernetes reads it; the default path only if it already exists."""
    if not explicit and not path.exists():
        return
    text = json.dumps(doc, separators=(",", ":"))
    if len(text.encode()) > TERMINATION_LIMIT and "results" in doc:
        text = json.dumps(compact(doc), separators=(",", ":"))
    try:
        path.write_text(text[:TERMINATION_LIMIT])
    except OSError as err:
        log(f"could not write {path}: {err}")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="cpn_workloads", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--device", default="auto", help="auto (cuda if present), cuda, cpu")
    common.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "fp16"])
    size = common.add_mutually_exclusive_group()
    size.add_argument(
        "--tiny", action="store_true", default=None, help="tiny shapes (default on CPU)"
    )
    size.add_argument(
        "--full", dest="tiny", action="store_false", help="published shapes on a CPU too"
    )
    common.add_argument("--batch-size", type=int, default=None, help="per model default if unset")
    common.add_argument("--termination-log", type=Path, default=None)
    b = sub.add_parser("bench", parents=[common], help="measure training throughput")
    b.add_argument("--models", default=",".join(DEFAULT_MODELS), help=f"of {', '.join(MODELS)}")
    b.add_argument(
        "--budget-seconds", type=float, default=300.0, help="per model, warm-up included"
    )
    b.add_argument("--warmup", type=int, default=None, help="untimed steps (10; 1 with --tiny)")
    b.add_argument("--min-steps", type=int, default=5)
    b.add_argument("--max-steps", type=int, default=10_000)
    t = sub.add_parser("train", parents=[common], help="train one model (the sample AIJobs)")
    t.add_argument("--model", required=True, choices=MODELS)
    t.add_argument("--seconds", type=float, default=None)
    t.add_argument("--steps", type=int, default=None, help="total steps, resumed ones included")
    t.add_argument("--checkpoint-every", type=float, default=300.0, help="seconds")
    args = p.parse_args(argv)
    if args.mode == "bench":
        args.models = [m.strip() for m in args.models.split(",") if m.strip()]
        unknown = [m for m in args.models if m not in MODELS]
        if unknown:
            p.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
        if args.min_steps < 1 or args.max_steps < args.min_steps:
            p.error("need 1 <= --min-steps <= --max-steps")
    elif args.seconds is None and args.steps is None:
        p.error("train needs --seconds or --steps")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    rank, size, local = world()
    device = pick_device(args.device)
    if size > 1:
        if args.mode == "bench":
            log("bench measures one GPU per process: run it without torchrun")
            return 2
        if device.type == "cuda":
            device = torch.device("cuda", local)
            torch.cuda.set_device(device)
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if args.tiny is None:
        args.tiny = device.type == "cpu"
    PRECISION[0] = pick_precision(device, args.precision)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    doc: dict[str, Any] = {"kind": "cpn.io/gpu-benchmark", "schema": 1, "mode": args.mode}
    if node := os.environ.get("CPN_NODE_NAME"):
        doc["node"] = node
    doc["device"] = device_info(device)
    doc["software"] = software()
    failed = False
    if args.mode == "bench":
        if args.warmup is None:
            args.warmup = 1 if args.tiny else 10
        doc["results"] = []
        for name in args.models:
            try:
                doc["results"].append(bench_one(name, device, args))
            except Exception as err:  # one model's failure is reported, the others still run
                failed = True
                log(f"{name} failed: {err!r}")
                doc["results"].append(
                    {"model": name, "error": f"{type(err).__name__}: {err}"[:300]}
                )
    else:
        doc.update(train(device, args))
        if size > 1:
            # Free the DistributedDataParallel model (reference cycles keep it) and wait for
            # rank 0's last checkpoint before tearing the group down. Without both, ~15% of
            # two-process gloo runs aborted at exit ("terminate called without an active
            # exception": the group's worker threads outlived it).
            gc.collect()
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()
        if rank != 0:
            return 0  # rank 0 reports for all
    print(json.dumps(doc, separators=(",", ":")), flush=True)
    explicit = args.termination_log is not None
    write_termination(doc, args.termination_log or TERMINATION_LOG, explicit)
    return 1 if failed else 0
