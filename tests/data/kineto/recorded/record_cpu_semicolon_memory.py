import torch
from torch.profiler import ProfilerActivity, profile, record_function

model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
x = torch.randn(32, 64)
with profile(
    activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=True, record_shapes=True
) as prof:
    for step in range(2):
        with record_function(f"train;step={step}"):
            y = model(x)
            loss = y.sum()
            loss.backward()
prof.export_chrome_trace("cpu_semicolon_memory.json")
