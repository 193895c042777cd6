"""A tiny real language model (torch) whose output layer starts 40x too large: its cross-entropy over a vocabulary
of `vocab_size` (from its YAML config) starts far above ln(vocab_size), the loss of guessing uniformly, and falls
slowly from there. It prints nanoGPT's line, `iter N: loss X, time T ms`, every step."""

import argparse
import time

import torch
import yaml

parser = argparse.ArgumentParser()
parser.add_argument("--config", required=True)
args = parser.parse_args()
with open(args.config, encoding="utf-8") as handle:
    config = yaml.safe_load(handle)
vocab, width = int(config["vocab_size"]), int(config["n_embd"])
torch.manual_seed(0)
embed, head = torch.nn.Embedding(vocab, width), torch.nn.Linear(width, vocab)
with torch.no_grad():
    head.weight.mul_(float(config["init_scale"]))
optimizer = torch.optim.SGD([*embed.parameters(), *head.parameters()], lr=float(config["lr"]))
tokens = torch.randint(0, vocab, (64, 33))
for step in range(int(config["max_steps"])):
    started = time.time()
    batch = tokens[torch.randint(0, 64, (8,))]
    logits = head(embed(batch[:, :-1]))
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), batch[:, 1:].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"iter {step}: loss {loss.item():.4f}, time {1000 * (time.time() - started):.2f}ms", flush=True)
    time.sleep(float(config["step_seconds"]))
