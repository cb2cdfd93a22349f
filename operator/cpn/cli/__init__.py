"""Every ``cpn`` command: :mod:`cpn.cli.main` parses ``cpn COMMAND`` and runs the command's module.

One module per command: :mod:`~cpn.cli.run` (the operator), :mod:`~cpn.cli.demo`,
:mod:`~cpn.cli.explain`, :mod:`~cpn.cli.queue`, :mod:`~cpn.cli.replay` and
:mod:`~cpn.cli.validate`; :mod:`~cpn.cli.devbed` is what ``cpn demo``, the end-to-end
tests and the benchmarks do on the test bed's hub. ``cpn simulate``, ``cpn predictor``
and ``cpn testbed`` live with their packages (:mod:`cpn.sim.cli`, ``predictor.cli``,
``testbed.cli``). The commands reach the clusters only through :mod:`cpn.adapters`.
"""
