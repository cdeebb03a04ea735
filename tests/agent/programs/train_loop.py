"""A small CPU PyTorch training loop for on-demand traces: train_step runs the model's
forward (Net.forward -> aten::addmm, aten::relu), the loss, backward and the optimizer step.
Usage: train_loop.py SECONDS [READY_FILE] (created once 20 steps are done)"""

import sys
import time

import torch


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(64, 64)
        self.l2 = torch.nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.relu(self.l1(x)))


def train_step(model: Net, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()


def main(seconds: float, ready: str = "") -> None:
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randn(32, 8)
    end = time.time() + seconds
    steps = 0
    while time.time() < end:
        train_step(model, opt, x, y)
        steps += 1
        if steps == 20 and ready:
            open(ready, "w").close()
        time.sleep(0.005)


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 120.0, *sys.argv[2:3])
