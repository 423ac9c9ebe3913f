"""``tune-spec-k check``: a validation sweep's verdict on a deployed schedule against static K
and no speculation.

- :mod:`lib.loop.check.report`: :func:`~lib.loop.check.report.check_deployment`, the check of one
  validation sweep, and its :class:`~lib.loop.check.report.CheckReport`;
- :mod:`lib.loop.check.arms`: which arm (dynamic, static K, one-range, no speculation) each run
  belongs to;
- :mod:`lib.loop.check.judge`: the verdict per anchor (P(eps-good), gains, the Dynamic SD
  overhead) and the check's settings;
- :mod:`lib.loop.check.context`: the check per context point of the prompt length;
- :mod:`lib.loop.check.schedule_file`: the context schedule a ``--schedule`` file holds.
"""
