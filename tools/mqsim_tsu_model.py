"""MQSim_CXL's flash scheduling as an event-driven model, for diagnosis (not part of tiersim):
feed it the flash transactions a patched MQSim_CXL logged as they reached its scheduler, and it
gives each read's data-out time under MQSim_CXL's rules or under a variant, to find which rule
sets a latency distribution (docs/cxl_flash.md, "What is left").

The rules (spypaul/MQSim_CXL_Linux 3701f7b, paths under src/ssd/):
- A channel that frees goes to its chips in a rotating turn; the first chip whose die is idle
  and has a transaction waiting takes it (TSU_Base.cpp:54-71; TSU_OutofOrder.cpp:229-247 on each
  arrival). A read's data out goes before any new command (NVM_PHY_ONFI_NVDDR2.cpp:545).
- A die's reads go before its writes; the command is formed when the die gets the channel: the
  head of its queue and the first waiting transaction of each other plane at the head's page
  (TSU_OutofOrder.cpp:359-399 reads, :465-478 writes).
- Command cycles: reads 290 + 650 ns per further plane, programs 361 + 816 ns
  (ONFI_Channel_NVDDR2.cpp:16-19, 26-29); a read senses 3000 + 20 ns (nvm_chip/flash_memory/
  Flash_Chip.h:29), a program 100 us; data moves in no time (B2). The die is idle again once
  every read of its command has moved its data.

The log (one line per event, times in ns), written by four added statements: `A t ch chip type
lpa:plane:block:page` when a transaction enters TSU_OutOfOrder::Schedule's queues (type 0 read,
1 write); `C t ch chip type n lpa:plane:block:page:issue ...` in
NVM_PHY_ONFI_NVDDR2::Send_command_to_chip; `R t ch chip plane issue` at READ_DATA_TRANSFERRED;
`W t ch chip n` when a program ends (handle_ready_signal_from_chip).

    python tools/mqsim_tsu_model.py fc_trace.txt
"""

from __future__ import annotations

import argparse
import heapq
from collections import deque

READ_SENSE_NS = 3000 + 20
PROGRAM_NS = 100_000


def read_command_ns(planes: int) -> int:
    return 290 + 650 * (planes - 1)


def program_command_ns(planes: int) -> int:
    return 361 + 816 * (planes - 1)


def load(path: str) -> tuple[list[tuple], list[tuple]]:
    """(arrivals, read completions): arrivals `(t, ch, chip, type, plane, page)` in log order,
    completions `(t, (ch, chip, plane, issue))`."""
    arrivals, done = [], []
    with open(path) as f:
        for line in f:
            p = line.split()
            if p[0] == "A":
                _, plane, _, page = map(int, p[5].split(":"))
                arrivals.append((int(p[1]), int(p[2]), int(p[3]), int(p[4]), plane, page))
            elif p[0] == "R":
                done.append((int(p[1]), (int(p[2]), int(p[3]), int(p[4]), int(p[5]))))
    return arrivals, done


class Tsu:
    """`arbitration`: "round_robin" (MQSim_CXL) or "oldest" (the channel goes to the idle die
    whose oldest waiting transaction arrived first)."""

    def __init__(self, channels: int = 8, chips: int = 8, arbitration: str = "round_robin"):
        self.chips = chips
        self.arbitration = arbitration
        self.events: list = []
        self.seq = 0
        self.channel_busy = [False] * channels
        self.turn = [0] * channels
        self.data_out = [deque() for _ in range(channels)]
        self.idle = [[True] * chips for _ in range(channels)]
        self.unread = [[0] * chips for _ in range(channels)]
        self.reads = [[[] for _ in range(chips)] for _ in range(channels)]
        self.writes = [[[] for _ in range(chips)] for _ in range(channels)]
        #: (data-out time, (ch, chip, plane, arrival)) of every read, in completion order.
        self.done: list[tuple[int, tuple]] = []
        #: (issue time, ch, chip, type, planes) of every command.
        self.commands: list[tuple] = []
        #: (end, ch, chip, planes) of every program.
        self.programs: list[tuple] = []

    def _at(self, t: int, kind: str, data) -> None:
        heapq.heappush(self.events, (t, self.seq, kind, data))
        self.seq += 1

    def _issue(self, t: int, ch: int, chip: int) -> None:
        if not self.idle[ch][chip]:
            return
        queue, write = self.reads[ch][chip], False
        if not queue:
            queue, write = self.writes[ch][chip], True
            if not queue:
                return
        page, planes, taken = queue[0][1], 0, []
        for i, (plane, pg, _) in enumerate(queue):
            if not planes & (1 << plane) and (planes == 0 or pg == page):
                planes |= 1 << plane
                taken.append(i)
        batch = [queue[i] for i in taken]
        for i in reversed(taken):
            del queue[i]
        self.idle[ch][chip] = False
        self.channel_busy[ch] = True
        self.commands.append((t, ch, chip, int(write), len(batch)))
        if write:
            end = t + program_command_ns(len(batch))
            self._at(end + PROGRAM_NS, "programmed", (ch, chip, batch))
        else:
            end = t + read_command_ns(len(batch))
            self._at(end + READ_SENSE_NS, "sensed", (ch, chip, batch))
        self._at(end, "command_sent", (ch, chip, None))

    def _grant(self, t: int, ch: int) -> None:
        if self.arbitration == "oldest":
            waiting = [
                ((self.reads[ch][c] or self.writes[ch][c])[0][2], c)
                for c in range(self.chips)
                if self.idle[ch][c] and (self.reads[ch][c] or self.writes[ch][c])
            ]
            if waiting:
                self._issue(t, ch, min(waiting)[1])
            return
        for _ in range(self.chips):
            chip = self.turn[ch]
            self._issue(t, ch, chip)
            self.turn[ch] = (chip + 1) % self.chips
            if self.channel_busy[ch]:
                break

    def _channel_freed(self, t: int, ch: int) -> None:
        self.channel_busy[ch] = False
        if self.data_out[ch]:
            chip, tr = self.data_out[ch].popleft()
            self._move_data(t, ch, chip, tr)
        else:
            self._grant(t, ch)

    def _move_data(self, t: int, ch: int, chip: int, tr: tuple) -> None:
        self.channel_busy[ch] = True
        self._at(t, "moved", (ch, chip, tr))

    def run(self, arrivals: list[tuple]) -> Tsu:
        """Events at the time of an arrival go first (they were scheduled earlier)."""
        i = 0
        while i < len(arrivals) or self.events:
            if i < len(arrivals) and (not self.events or arrivals[i][0] < self.events[0][0]):
                t, ch, chip, kind, plane, page = arrivals[i]
                i += 1
                (self.writes if kind == 1 else self.reads)[ch][chip].append((plane, page, t))
                for c, busy in enumerate(self.channel_busy):
                    if not busy:
                        self._grant(t, c)
                continue
            t, _, kind, (ch, chip, x) = heapq.heappop(self.events)
            if kind == "command_sent":
                self._channel_freed(t, ch)
            elif kind == "sensed":
                self.unread[ch][chip] += len(x)
                for tr in x:
                    if self.channel_busy[ch]:
                        self.data_out[ch].append((chip, tr))
                    else:
                        self._move_data(t, ch, chip, tr)
            elif kind == "moved":
                plane, _, arrived = x
                self.done.append((t, (ch, chip, plane, arrived)))
                self.unread[ch][chip] -= 1
                if self.unread[ch][chip] == 0:
                    self.idle[ch][chip] = True
                self._channel_freed(t, ch)
            elif kind == "programmed":
                self.programs.append((t, ch, chip, len(x)))
                self.idle[ch][chip] = True
                if self.channel_busy[ch]:
                    continue
                self._grant(t, ch)
        return self


def percentiles(done: list[tuple[int, tuple]]) -> dict:
    lat = sorted(t - key[3] for t, key in done)
    n = len(lat)
    return {f"p{p}": lat[min(n - 1, p * n // 100)] for p in (10, 50, 90, 99)} | {"mean": sum(lat) // n}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", help="the patched MQSim_CXL's transaction log")
    args = ap.parse_args()
    arrivals, logged = load(args.log)
    print("MQSim_CXL         ", percentiles(logged))
    for arbitration in ("round_robin", "oldest"):
        model = Tsu(arbitration=arbitration).run(arrivals)
        same = len(set(model.done) & set(logged))
        print(
            f"model {arbitration:12}", percentiles(model.done), f"({same} of {len(logged)} reads at MQSim_CXL's time)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
