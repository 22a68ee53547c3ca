"""TaskQ's ratio to each peer, from the JSON lines the peer harness wrote (`make bench-peers`).

Usage: python benchmarks/peer_ratios.py RAW.jsonl [RAW.jsonl ...]
Medians per (peer, measurement); throughput ratios are taskq / peer (higher is better),
latency ratios peer / taskq (higher is better too).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

THROUGHPUT = {"A": "A enqueue", "B16": "B drain c=16", "B1": "B drain c=1"}
LATENCY = {"p50_ms": "C p50", "p99_ms": "C p99"}


def medians(paths: list[Path]) -> dict[tuple[str, str], float]:
    """Median of every (peer, key) over the repetitions that passed."""
    samples: dict[tuple[str, str], list[float]] = defaultdict(list)
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            if row.get("ok") is False:
                continue
            peer, bench = row["peer"], row["bench"]
            if bench == "enqueue":
                samples[(peer, "A")].append(row["jobs_per_s"])
            elif bench == "drain":
                samples[(peer, f"B{row['concurrency']}")].append(row["jobs_per_s"])
            elif bench == "latency":
                for key in LATENCY:
                    samples[(peer, key)].append(row[key])
    return {key: statistics.median(values) for key, values in samples.items()}


def figure(value: float | None, key: str) -> str:
    """Jobs/s as whole numbers, milliseconds with one decimal."""
    if value is None:
        return "-"
    return f"{value:,.1f}" if key in LATENCY else f"{value:,.0f}"


def main(argv: list[str]) -> int:
    table = medians([Path(p) for p in argv])
    peers = sorted({peer for peer, _ in table if peer != "taskq"})
    print("| measurement | taskq | " + " | ".join(f"{p} | taskq / {p}" for p in peers) + " |")
    print("|---|---|" + "---|---|" * len(peers))
    for key, label in {**THROUGHPUT, **LATENCY}.items():
        mine = table.get(("taskq", key))
        cells = [label, figure(mine, key)]
        for peer in peers:
            theirs = table.get((peer, key))
            if mine is None or theirs is None:
                cells += [figure(theirs, key), "-"]
                continue
            ratio = mine / theirs if key in THROUGHPUT else theirs / mine
            cells += [figure(theirs, key), f"{ratio:.2f}x"]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
