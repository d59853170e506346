"""Run under torchrun by tests/test_tp.py: one rank of a tensor-parallel FastModel (gloo, CPU)."""
import sys

import torch

import fastdecode

folder, world, out, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
fm = fastdecode.from_pretrained(folder, tp=world, device="cpu", dtype=torch.float32,
                                max_seq_len=64, mode=mode)
ids = torch.arange(3, 20)[None] % fm.spec.vocab_size
logits = torch.cat([fm(ids[:, :9])[0]] + [fm(ids[:, t:t + 1])[0] for t in range(9, 17)])
tokens = fm.generate(ids[:, :5], max_new_tokens=8, eos_token_id=[])
sampled = fm.generate(ids[:, :5], max_new_tokens=8, eos_token_id=[], do_sample=True,
                      temperature=1.5, seed=3)
torch.save({"rank": fm.rank, "logits": logits, "tokens": tokens, "sampled": sampled},
           f"{out}.{fm.rank}")
