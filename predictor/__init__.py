"""Runtime predictor: how long a job runs on each GPU type."""
