"""cpn's benchmark and sample-training workload (issue 17 item 1); see workloads/README.md."""

__version__ = "0.1.0"
