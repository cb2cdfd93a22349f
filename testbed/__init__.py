"""Local test bed: real Kubernetes control planes with simulated GPU nodes."""
