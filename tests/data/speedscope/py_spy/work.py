"""A small two-thread CPU workload profiled with py-spy (speedscope output)."""

import threading
import time


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def hashing(until):
    import hashlib

    data = b"x" * 65536
    while time.time() < until:
        hashlib.sha256(data).hexdigest()


def main():
    until = time.time() + 1.5
    t = threading.Thread(target=hashing, args=(until,), name="hasher")
    t.start()
    while time.time() < until:
        fib(18)
    t.join()


if __name__ == "__main__":
    main()
