"""Charts of a :class:`lib.schedule.TuningResult` for the app and the CLI, as Vega-Lite
specifications; the only package that imports Altair (and vl-convert, for images).

- :mod:`~lib.present.charts.base`: :class:`Chart`, colours and verdicts, axis titles, the
  helpers that fill a cached template with rows, notices and image grids.
- :mod:`~lib.present.charts.labels`: label rows on a log batch-size axis, so labels never overlap.
- :mod:`~lib.present.charts.cells`: the rows of the small charts (thinned runs, cell medians).
- :mod:`~lib.present.charts.small_multiples`: objective and acceptance against K, per batch size.
- :mod:`~lib.present.charts.headline`: the speed-up over K=0 by batch size, the answer at a glance.
- :mod:`~lib.present.charts.k_track`: the headline's track of the deployed K at every batch size.
- :mod:`~lib.present.charts.schedule`: the step and interpolated schedules with switch points.
- :mod:`~lib.present.charts.confidence`: P(eps-good) of every K, per batch size.
- :mod:`~lib.present.charts.rules`: the seed's rule against the confident rule.
- :mod:`~lib.present.charts.comparison`: two tunings' schedules (``tune-spec-k diff``).
- :mod:`~lib.present.charts.heatmap`: the chosen K over batch size x prompt length.
"""
