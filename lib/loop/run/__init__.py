"""``tune-spec-k run``: the measurement loop, closed (issue 41). Round 0 measures a lean grid,
each later round only what the tuning left open (a follow-up plan), until a stop rule says
that more rounds would not change the answer or cannot be afforded.

- :mod:`~lib.loop.run.rounds`: ``rounds.json``, the log of every round (one writer, one reader)
- :mod:`~lib.loop.run.accounting`: GPU time, measured from a round's run files and estimated
  for a plan
- :mod:`~lib.loop.run.stopping`: the stop rules, one small function each
- :mod:`~lib.loop.run.sweep`: a round's sweep run through its plan's ``run.sh``, with a log, a
  progress bar, and no child left behind when stopped
"""
