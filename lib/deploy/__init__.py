"""The deployment layer: from the core's decisions to what an engine runs.

Between the core (the policy and its analysis) and the presentation:

- :mod:`lib.deploy.decisions`: :class:`~lib.deploy.decisions.Decisions`, what a deployment
  needs of a tuning (the schedule, the engine's K, the measured medians per anchor and K, the
  draft settings, the ceiling it was tuned under, the grid), from an analysis in memory or
  from any file holding a schedule (the one typed reader of a result JSON);
- :mod:`lib.deploy.constraints`: what the engine does between and beyond the anchors (vLLM's
  CUDA-graph capture ceiling), applied in one place;
- :mod:`lib.deploy.tuning`: that rule on an analysis (``tune``, ``check`` and the app), with
  the server settings the sweep recorded or saved;
- :mod:`lib.deploy.registry`: every engine format, one ``format_*.py`` module each (name,
  label, file name, the flags it reads, build, read back; :mod:`lib.deploy.settings` holds the
  export's flags, :mod:`lib.deploy.grid` what the context formats share); the CLI's
  ``export``, ``tune``'s printed configs and the app's downloads iterate it.
"""
