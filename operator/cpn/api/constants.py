"""Names shared with Kubernetes: API group, labels, annotations, condition types and reasons."""

from __future__ import annotations

from typing import Final

GROUP: Final = "cpn.io"
VERSION: Final = "v1alpha1"
AIJOB_PLURAL: Final = "aijobs"
MEMBER_PLURAL: Final = "memberclusters"
BENCHMARK_PLURAL: Final = "gpubenchmarks"


# Labels on member Jobs (owner references cannot cross clusters).
LABEL_HUB: Final = "cpn.io/hub"
LABEL_NAMESPACE: Final = "cpn.io/aijob-namespace"
LABEL_NAME: Final = "cpn.io/aijob-name"
LABEL_UID: Final = "cpn.io/aijob-uid"
LABEL_ATTEMPT: Final = "cpn.io/attempt"
#: The attempt's fencing token (cpn.core.fence): only the Job carrying the current one counts.
#: label of cpn's GPU benchmark Jobs and pods: the GPUBenchmark's name (cut to 63)
LABEL_BENCHMARK: Final = "cpn.io/benchmark"
LABEL_FENCE: Final = "cpn.io/fence"
#: label of cpn's staging Jobs and pods (runtime/staging.py): which input they copy, hashed
LABEL_STAGING: Final = "cpn.io/staging"
#: label of cpn's image pre-pull Jobs (runtime/staging.py): a hash of image and node
LABEL_PREPULL: Final = "cpn.io/prepull"
#: annotations of a staging Job and its pod: what it copies, from where, how many bytes,
#: its attempt and when cpn predicted it to take
ANNOTATION_STAGING_INPUT: Final = "cpn.io/staging-input"
ANNOTATION_STAGING_SOURCE: Final = "cpn.io/staging-source"
ANNOTATION_STAGING_BYTES: Final = "cpn.io/staging-bytes"
ANNOTATION_STAGING_ATTEMPT: Final = "cpn.io/staging-attempt"
ANNOTATION_STAGING_PREDICTED: Final = "cpn.io/staging-predicted-seconds"
LABEL_MANAGED: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "cpn"

# Namespace labels that say who owns the jobs in it (set by admins, not users).
LABEL_USER: Final = "cpn.io/user"
LABEL_GROUP: Final = "cpn.io/group"

#: Template annotation: JSON {annotation: {gpu type: value}} resolved for the chosen GPU type.
ANNOTATION_PER_GPU_TYPE: Final = "cpn.io/per-gpu-type"
ANNOTATION_GPU_TYPE: Final = "cpn.io/gpu-type"
ANNOTATION_HAMI_POOL: Final = "hami.io/resource-pool"
#: Pod annotation of an attempt that resumes a preempted job: seconds of compute its
#: checkpoints kept (also in the CPN_RESUME_FROM_S environment variable).
ANNOTATION_RESUME_FROM: Final = "cpn.io/resume-from-seconds"
#: AIJob annotation: the directory under which its attempts checkpoint (CPN_CHECKPOINT_*).
ANNOTATION_CHECKPOINT_ROOT: Final = "cpn.io/checkpoint-root"
DEFAULT_CHECKPOINT_ROOT: Final = "/checkpoints"

GPU_RESOURCE: Final = "nvidia.com/gpu"
HAMI_GPU_MEMORY: Final = "nvidia.com/gpumem"  # MiB per GPU
HAMI_GPU_CORES: Final = "nvidia.com/gpucores"  # percent of one GPU
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL: Final = "nvidia.com/gpu.memory"  # MiB
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"

# AIJob phases.
PHASE_QUEUED: Final = "Queued"
PHASE_DISPATCHED: Final = "Dispatched"
#: placed, its inputs being copied to its member (a staging Job); its GPUs are held
PHASE_STAGING: Final = "Staging"
PHASE_RUNNING: Final = "Running"
PHASE_SUCCEEDED: Final = "Succeeded"
PHASE_FAILED: Final = "Failed"
PHASE_SUSPENDED: Final = "Suspended"
PHASE_INVALID: Final = "Invalid"
FINISHED_PHASES: Final = frozenset({PHASE_SUCCEEDED, PHASE_FAILED, PHASE_INVALID})

# Condition types (PascalCase, as Kubernetes and Kueue use).
COND_VALID: Final = "Valid"
COND_ADMITTED: Final = "Admitted"  # placed and dispatched to a member cluster
COND_RUNNING: Final = "Running"
COND_FINISHED: Final = "Finished"
#: False (a Warning) while spec.queue names a queue the policy does not know.
COND_QUEUE_KNOWN: Final = "QueueKnown"
COND_READY: Final = "Ready"  # MemberCluster
COND_METRICS: Final = "MetricsFresh"  # MemberCluster
#: MemberCluster: nodes whose GPU benchmark is well below their peers' (core.benchmarks.slow_nodes)
COND_SLOW_NODES: Final = "SlowNodes"
