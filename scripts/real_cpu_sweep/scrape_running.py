"""Scrapes a vLLM server's /metrics every INTERVAL seconds until SIGTERM/SIGINT, then writes
the running-requests gauge (vllm:num_requests_running, one series per engine) two ways:

- OUT.csv: ``timestamp,batch_size`` samples (engine 0; tune-spec-k --traffic reads it);
- OUT.json: the shape of a Prometheus ``/api/v1/query_range`` answer, one series per engine,
  ASSEMBLED FROM THESE SCRAPES (no Prometheus server was involved).

Standard library only, so it runs in any Python. Usage:
    python scrape_running.py URL OUT_STEM [INTERVAL]
"""

from __future__ import annotations

import json
import re
import signal
import sys
import time
import urllib.request

GAUGE = "vllm:num_requests_running"
LINE = re.compile(r"^" + re.escape(GAUGE) + r"(\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(url: str) -> dict[tuple[tuple[str, str], ...], str]:
    with urllib.request.urlopen(url, timeout=2) as response:
        text = response.read().decode()
    found = {}
    for line in text.splitlines():
        match = LINE.match(line)
        if match:
            labels = tuple(sorted(LABEL.findall(match.group("labels") or "")))
            found[labels] = match.group("value")
    return found


def main() -> None:
    url, stem = sys.argv[1], sys.argv[2]
    interval = float(sys.argv[3]) if len(sys.argv) > 3 else 0.5
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    series: dict[tuple[tuple[str, str], ...], list[list[object]]] = {}
    start = time.time()
    tick = 0
    while not stop:
        now = time.time()
        try:
            for labels, value in scrape(url).items():
                series.setdefault(labels, []).append([round(now, 3), value])
        except OSError as error:
            print(f"scrape failed at {now:.1f}: {error}", file=sys.stderr)
        tick += 1
        time.sleep(max(0.0, start + tick * interval - time.time()))
    result = [
        {"metric": {"__name__": GAUGE, **dict(labels)}, "values": values}
        for labels, values in sorted(series.items())
    ]
    with open(stem + ".json", "w") as out:
        json.dump({"status": "success", "data": {"resultType": "matrix", "result": result}}, out)
        out.write("\n")
    first = result[0]["values"] if result else []
    with open(stem + ".csv", "w") as out:
        out.write("timestamp,batch_size\n")
        for stamp, value in first:
            out.write(f"{stamp},{int(float(str(value)))}\n")
    print(
        f"{sum(len(s['values']) for s in result)} samples in {len(result)} series", file=sys.stderr
    )


if __name__ == "__main__":
    main()
