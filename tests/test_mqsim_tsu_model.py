"""tools/mqsim_tsu_model.py, the event-driven model of MQSim_CXL's flash scheduling used to find
the cause of the saturated points' spread (docs/cxl_flash.md): hand-checked times (ns)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import mqsim_tsu_model as m  # noqa: E402


def reads(*arrivals):
    """(t, chip, plane) reads on channel 0, page 0."""
    return [(t, 0, chip, 0, plane, 0) for t, chip, plane in arrivals]


def test_a_command_forms_when_the_die_frees_so_a_later_read_joins_an_earlier_one():
    # Read 1 (plane 0) finds die 0 idle: 290 ns of command, 3020 of sensing, data out at 3310.
    # Read 2 (plane 1, at 100) and read 3 (plane 0, at 200, after read 1 was issued) wait; when
    # the die frees at 3310 the command takes the head (read 2) and the first waiting read of
    # each other plane (read 3): 290 + 650 ns of command -> 4250, sensed at 7270; both move their
    # data then, in no time. At arrival, read 2 alone would have ended at 3310 + 3310 = 6620.
    tsu = m.Tsu(channels=1, chips=2).run(reads((0, 0, 0), (100, 0, 1), (200, 0, 0)))
    assert tsu.done == [(3310, (0, 0, 0, 0)), (7270, (0, 0, 1, 100)), (7270, (0, 0, 0, 200))]
    assert tsu.commands == [(0, 0, 0, 0, 1), (3310, 0, 0, 0, 2)]


def test_the_channel_goes_round_robin_not_to_the_oldest_read():
    # Three chips on one channel. Chip 0 takes the channel at 0 (the turn moves to chip 1).
    # While its command holds the channel (0..290), chip 2 gets a read at 10 and chip 1 one at
    # 20. At 290 the turn is chip 1's: it goes first although chip 2's read is older
    # (290..580, sensed at 3600), then chip 2 (580..870, sensed at 3890).
    tsu = m.Tsu(channels=1, chips=3).run(reads((0, 0, 0), (10, 2, 0), (20, 1, 0)))
    assert tsu.commands == [(0, 0, 0, 0, 1), (290, 0, 1, 0, 1), (580, 0, 2, 0, 1)]
    assert sorted(tsu.done) == [(3310, (0, 0, 0, 0)), (3600, (0, 1, 0, 20)), (3890, (0, 2, 0, 10))]
    # Given to the oldest read instead, chip 2 goes before chip 1.
    oldest = m.Tsu(channels=1, chips=3, arbitration="oldest").run(reads((0, 0, 0), (10, 2, 0), (20, 1, 0)))
    assert oldest.commands == [(0, 0, 0, 0, 1), (290, 0, 2, 0, 1), (580, 0, 1, 0, 1)]


def test_reads_go_before_a_waiting_write_and_writes_join_on_distinct_planes():
    # Die 0 reads from 0 (done at 3310). Two writes (planes 0 and 1) and then a read arrive while
    # it is busy: at 3310 the read goes first (3310 + 3310 = 6620), then both writes as one
    # two-plane program: 361 + 816 ns of command from 6620, + 100 us -> 107_797.
    arr = reads((0, 0, 0)) + [(10, 0, 0, 1, 0, 0), (20, 0, 0, 1, 1, 0)] + reads((30, 0, 2))
    tsu = m.Tsu(channels=1, chips=1).run(arr)
    assert tsu.commands == [(0, 0, 0, 0, 1), (3310, 0, 0, 0, 1), (6620, 0, 0, 1, 2)]
    assert [t for t, _ in tsu.done] == [3310, 6620]
    assert tsu.programs == [(6620 + 361 + 816 + 100_000, 0, 0, 2)]
