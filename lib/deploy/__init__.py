"""The deployment layer: from the core's decisions to what an engine runs.

Between the core (the policy and its analysis) and the loop. Its modules, in the order each
imports only those before it (``tests/test_layers.py``, ``DEPLOY_ORDER``):

- :mod:`~lib.deploy.settings`: the export's flags;
- :mod:`~lib.deploy.engine`: what is known of the engine (each server setting with its source);
- :mod:`~lib.deploy.result_file`: the result JSON, its one writer and its one typed reader;
- :mod:`~lib.deploy.decisions`: :class:`~lib.deploy.decisions.Decisions`, what a deployment
  needs of a tuning (in memory or from a result file);
- :mod:`~lib.deploy.constraints`: what the engine does between and beyond the anchors (vLLM's
  CUDA-graph capture ceiling), applied in one place;
- :mod:`~lib.deploy.engine_format`: what every format is built on;
- :mod:`~lib.deploy.grid`: what the context formats share (mix, losses, ranges, the build);
- :mod:`lib.deploy.formats`: every engine format, one module each;
- :mod:`~lib.deploy.deployed`: a deployed context schedule, read back;
- :mod:`~lib.deploy.registry`: the formats found, the one way to export, any file read;
- :mod:`~lib.deploy.verdict`: ready, provisional or cannot-tune, with every reason;
- :mod:`~lib.deploy.tuning`: the entry point: the capture rule and the verdict on an analysis
  (``tune``, ``check`` and the app), with the server settings the sweep recorded or saved.
"""
