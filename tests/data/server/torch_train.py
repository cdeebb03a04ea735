import torch, torch.nn as nn, time
torch.set_num_threads(1)
class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d, 4*d), nn.GELU(), nn.Linear(4*d, d))
        self.n1 = nn.LayerNorm(d); self.n2 = nn.LayerNorm(d)
    def forward(self, x):
        x = x + self.attn(self.n1(x), self.n1(x), self.n1(x))[0]
        return x + self.ff(self.n2(x))
class Model(nn.Module):
    def __init__(self, d=128, n=3):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(n)); self.head = nn.Linear(d, 10)
    def forward(self, x):
        for b in self.blocks: x = b(x)
        return self.head(x.mean(1))
def batches():
    while True:
        yield torch.randn(16, 32, 128), torch.randint(0, 10, (16,))
def train_step(model, opt, x, y):
    opt.zero_grad(); loss = nn.functional.cross_entropy(model(x), y); loss.backward(); opt.step(); return loss
m = Model(); opt = torch.optim.AdamW(m.parameters())
end = time.time() + 14
for x, y in batches():
    train_step(m, opt, x, y)
    if time.time() > end: break
