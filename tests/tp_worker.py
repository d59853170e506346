"""Run under torchrun by tests/test_tp.py: one rank of a tensor-parallel FastModel (gloo on the
CPU, or NCCL + symmetric memory on GPUs)."""
import sys

import torch

import fastdecode

folder, world, out, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
device = sys.argv[5] if len(sys.argv) > 5 else "cpu"  # "cuda": this rank's GPU
fm = fastdecode.from_pretrained(folder, tp=world, device=None if device == "cuda" else device,
                                dtype=torch.float32, max_seq_len=64, mode=mode)
ids = (torch.arange(3, 20)[None] % fm.spec.vocab_size).to(fm.device)
logits = torch.cat([fm(ids[:, :9])[0]] + [fm(ids[:, t:t + 1])[0] for t in range(9, 17)])
tokens = fm.generate(ids[:, :5], max_new_tokens=8, eos_token_id=[])
sampled = fm.generate(ids[:, :5], max_new_tokens=8, eos_token_id=[], do_sample=True,
                      temperature=1.5, seed=3)
penalized = fm.generate(ids[:, :5], max_new_tokens=8, eos_token_id=[], repetition_penalty=2.0)
torch.save({"rank": fm.rank, "logits": logits.cpu(), "tokens": tokens.cpu(),
            "sampled": sampled.cpu(), "penalized": penalized.cpu()},
           f"{out}.{fm.rank}")
