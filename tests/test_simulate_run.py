"""bench/simulate_run.py: its score (the share of batch sizes whose deployed K is within the
tolerance of the truth's best) on a truth where the answer is known by hand."""

from __future__ import annotations

from bench_scripts import load_bench_script

from lib.schedule import Schedule

simulate_run = load_bench_script("simulate_run")


def test_share_within_counts_the_batch_sizes_a_schedule_gets_right() -> None:
    # K=3 gives 200 up to batch 8 and 50 from 16 on; K=0 100 everywhere. Between 8 and 16 the
    # truth is linear in log batch size: K=3 gives 200 - 150 log2(b / 8). K=3 is within 1 %
    # of the best where it reaches 99: b <= 8 x 2^(101/150) = 12.77; K=0 where K=3 is at most
    # 100 / 0.99 = 101.01: b >= 8 x 2^(98.99/150) = 12.64. So K=3 is right up to 12, K=0 from
    # 13 on.
    grid = {str(b): {"0": 100.0, "3": 200.0 if b <= 8 else 50.0} for b in simulate_run.ANCHORS}
    ks = (0, 3)
    best, _ = Schedule.parse([[1, 12, 3], [13, 256, 0]])
    early, _ = Schedule.parse([[1, 11, 3], [12, 256, 0]])
    always_three, _ = Schedule.parse([[1, 256, 3]])
    assert best is not None and early is not None and always_three is not None
    assert simulate_run.share_within(best, grid, ks) == 1.0
    assert simulate_run.share_within(early, grid, ks) == 255 / 256  # wrong at 12 only
    assert simulate_run.share_within(always_three, grid, ks) == 12 / 256
    assert simulate_run.share_within(None, grid, ks) == 0.0
