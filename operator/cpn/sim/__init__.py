"""cpn's trace-driven, discrete-event simulator: the same ``plan_cycle`` on a recorded queue.

- :mod:`cpn.sim.trace`: the trace CSV contract, Gavel/Tiresias converters, a generator;
- :mod:`cpn.sim.clusters`: the cluster YAML contract;
- :mod:`cpn.sim.world`: the event loop that builds snapshots and carries out plans;
  :mod:`cpn.sim.jobs` (trace job to scheduler job, the truth), :mod:`cpn.sim.fleet`
  (nodes), :mod:`cpn.sim.staleness` (estimates to redo), :mod:`cpn.sim.records`
  (what a run yields);
- :mod:`cpn.sim.estimators`: oracle, noisy, user and predictor/history estimators;
- :mod:`cpn.sim.report`: metrics, per-job CSV, plots;
- :mod:`cpn.sim.runner`, :mod:`cpn.sim.cli`, :mod:`cpn.sim.compare`: ``cpn simulate``.
"""
