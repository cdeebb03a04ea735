"""A small program with nested calls and a thread switch between phases, profiled by
pyinstrument to make a speedscope file with times."""

import json
import time


def parse(n):
    text = json.dumps([{"i": i, "v": [i] * 20} for i in range(n)])
    return json.loads(text)


def score(rows):
    total = 0
    for r in rows:
        total += sum(x * x for x in r["v"])
    return total


def wait(seconds):
    time.sleep(seconds)


def main():
    for _ in range(3):
        rows = parse(3000)
        score(rows)
        wait(0.02)


if __name__ == "__main__":
    main()
