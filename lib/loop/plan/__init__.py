"""``tune-spec-k plan``: the params files and the command for `vllm bench sweep serve`, of three
kinds of plan (tuning, follow-up, validation), each one or more steps (one sweep each).

- :mod:`~lib.loop.plan.inputs`: refusals and whole numbers of the files a plan is made from
- :mod:`~lib.loop.plan.design`: the design (engine, workload), its checks, its layering
- :mod:`~lib.loop.plan.combos`: the serve and bench combos (K, anchors, repeats, replicas)
- :mod:`~lib.loop.plan.sweep_plan`: a plan and its steps, their serve, bench and sweep commands
- :mod:`~lib.loop.plan.run_script`: ``run.sh``, which runs the sweeps and saves server configs
- :mod:`~lib.loop.plan.tuning`: the tuning plan (K x anchor matrix) and the notes plans share
- :mod:`~lib.loop.plan.follow_up_needs`: what a follow-up must measure, read from a result
- :mod:`~lib.loop.plan.follow_up`: the follow-up plan, only the cells that need more runs
- :mod:`~lib.loop.plan.validation`: the tuned schedule against static K and no speculation
- :mod:`~lib.loop.plan.write`: the files of a plan, written
"""
