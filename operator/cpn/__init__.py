"""cpn: schedule AI training jobs across Kubernetes clusters from one hub."""

__version__ = "0.1.0"
