"""Known hot Python functions for the agent's CPU profiles: Model.forward spends about two
thirds of its CPU time in attention() and one third in mlp(). Usage: hot_model.py SECONDS"""

import sys
import time


def attention(n: int) -> int:
    return sum(i * i for i in range(n))


def mlp(n: int) -> int:
    return sum(i + 1 for i in range(n))


class Model:
    def forward(self) -> int:
        return attention(40_000) + attention(40_000) + mlp(40_000)


def main(seconds: float) -> None:
    model = Model()
    end = time.time() + seconds
    while time.time() < end:
        model.forward()


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 30.0)
