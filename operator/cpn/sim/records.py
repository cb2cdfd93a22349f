"""What a simulation run yields: a record per job and the cluster's time series."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class JobRecord:
    """What happened to one job (mutable while the simulation runs)."""

    job_id: str
    submit_s: float
    gpus: float
    duration_s: float
    model: str = ""
    user: str = ""
    group: str = ""
    infeasible: bool = False
    first_start_s: float | None = None
    finish_s: float | None = None
    run_s: float = 0.0  # time holding GPUs (transfer and restart included)
    gpu_s: float = 0.0  # GPU-seconds held
    preemptions: int = 0
    lost_gpu_s: float = 0.0  # GPU-seconds preemptions threw away (restart + work since checkpoint)
    cluster: str = ""
    gpu_type: str = ""
    runtime_s: float = 0.0  # true runtime on the GPU type it finished on
    estimate_s: float | None = None  # predicted runtime on that GPU type at its last start
    moved_gb: float = 0.0  # data and image its starts moved to their clusters
    # First ETA (``World(eta=True)``): the projection made right after the job arrived.
    eta_at_s: float | None = None  # when it was projected (None: never projected)
    eta_start_s: float | None = None  # projected start (None: not reached within the bound)
    eta_end_s: float | None = None  # projected end
    # eta_at_s + the projected wait calibrated from experience up to eta_at_s
    # (cpn.core.eta_calibration.WaitCalibrator, the operator's): the ETA a user is shown.
    eta_cal_start_s: float | None = None
    # the calibrated start's p20-p80 range (None until the calibrator followed enough jobs)
    eta_low_s: float | None = None
    eta_high_s: float | None = None

    @property
    def jct_s(self) -> float | None:
        """Completion time minus submit time (None while unfinished)."""
        return None if self.finish_s is None else self.finish_s - self.submit_s

    @property
    def wait_s(self) -> float | None:
        """Time spent pending (JCT minus time holding GPUs; None while unfinished)."""
        jct = self.jct_s
        return None if jct is None else max(0.0, jct - self.run_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class SimResult:
    """The outcome of one run: a record per job and the cluster's time series."""

    policy: str
    estimator: str
    records: tuple[JobRecord, ...]
    total_gpus: int
    times_s: tuple[float, ...]
    busy_gpus: tuple[float, ...]
    queue_len: tuple[int, ...]
    cycles: int
    wall_s: float
    plan_wall_s: float
    preemptions: int
    skipped_cycles: int = 0  # cycles skipped because no start was possible
    moved_gb: float = 0.0  # data and image moved between clusters, all starts
    eta_calls: int = 0  # projections made (``World(eta=True)``)
    eta_wall_s: float = 0.0  # time spent in them
    eta_max_cycles: int = 0  # the bound each projection ran under (0: ETAs off)
