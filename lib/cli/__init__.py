"""The ``tune-spec-k`` command line (:mod:`lib.cli.main`): tuning (:mod:`lib.cli.tune`) and the
loop's subcommands (:mod:`lib.cli.plan`, :mod:`lib.cli.check`, :mod:`lib.cli.diff`,
:mod:`lib.cli.export`), each a thin adapter over the layers below."""
