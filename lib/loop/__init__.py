"""The loop with vLLM around tuning, one module or package per ``tune-spec-k`` subcommand:
:mod:`~lib.loop.plan` (the sweep to run; a package, one module per idea of a plan),
:mod:`~lib.loop.check` (a deployed schedule against static K; a package),
:mod:`~lib.loop.diff` (two tunings), :mod:`~lib.loop.export` (a schedule for vLLM or
TensorRT-LLM). They build on the core (:mod:`lib.analysis` and below) and report
:class:`~lib.problems.Problem` values, never exceptions, for a user's mistakes.
"""
