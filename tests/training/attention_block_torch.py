"""A causal attention block in torch against dtr's, run on a dtr-worker (issue 42).

Reads the state file attention_block_dump wrote (format: nn/state_file.cpp, read with
seed_net_torch.read_state), rebuilds the same block with torch.nn.functional in float64 on
dtr's parameters and tokens:

    embedding + learned positions -> layer_norm -> causal multi-head self-attention
    (+ residual) -> layer_norm -> MLP with exact GELU (+ residual) -> vocabulary logits
    -> cross entropy against the next tokens (mean)

and compares the logits, the loss and every parameter's gradient (rtol 1e-9, atol 1e-11:
both sides compute in float64, so only rounding differs). Exits 1 naming each tensor that
differs, 77 (skipped) where torch is missing. Works with torch 1.13.
"""
import math
import sys

from seed_net_torch import read_state  # exits 77 where torch is missing

import torch
import torch.nn.functional as F

RTOL, ATOL = 1e-9, 1e-11
failures = []


def check(what, got, want):
    if tuple(got.shape) != tuple(want.shape):
        print("%-28s shape %s, torch %s FAIL" % (what, tuple(got.shape), tuple(want.shape)))
        failures.append(what)
        return
    err = (got - want).abs().max().item()
    scale = want.abs().max().item()
    ok = bool(torch.allclose(got, want, rtol=RTOL, atol=ATOL))
    print("%-28s max |diff| %.3g (scale %.3g) %s" % (what, err, scale, "ok" if ok else "FAIL"))
    if not ok:
        failures.append(what)


def attention(h, p, heads):
    """Causal multi-head self-attention of h (B, T, D), before the residual."""
    b, t, d = h.shape
    dh = d // heads

    def split(name):
        y = F.linear(h, p[name + ".weight"], p[name + ".bias"])
        return y.view(b, t, heads, dh).transpose(1, 2)

    q, k, v = split("attn.q"), split("attn.k"), split("attn.v")
    scores = q @ k.transpose(-2, -1) / math.sqrt(dh)
    future = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    weights = F.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    mixed = (weights @ v).transpose(1, 2).reshape(b, t, d)
    return F.linear(mixed, p["attn.out.weight"], p["attn.out.bias"])


def forward(p, ids, heads):
    """The vocabulary logits (B, T, V) of the token ids (B, T)."""
    d = p["tok_emb"].shape[1]
    x = F.embedding(ids, p["tok_emb"]) + p["pos_emb"]
    x = x + attention(F.layer_norm(x, (d,), p["ln1.weight"], p["ln1.bias"], 1e-5), p, heads)
    h = F.layer_norm(x, (d,), p["ln2.weight"], p["ln2.bias"], 1e-5)
    hidden = F.gelu(F.linear(h, p["mlp.fc1.weight"], p["mlp.fc1.bias"]))  # exact (erf) GELU
    x = x + F.linear(hidden, p["mlp.fc2.weight"], p["mlp.fc2.bias"])
    return F.linear(x, p["head.weight"], p["head.bias"])


def main():
    s = read_state(sys.argv[1])
    heads = int(s["config.heads"].item())
    names = [k[len("param."):] for k in s if k.startswith("param.")]
    p = {n: s["param." + n].clone().requires_grad_(True) for n in names}
    for n, t in p.items():
        assert t.dtype == torch.float64, "param.%s is %s, not float64" % (n, t.dtype)
    ids, targets = s["input.ids"].long(), s["input.targets"].long()

    logits = forward(p, ids, heads)
    check("logits", s["out.logits"], logits.detach())
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    check("loss", s["out.loss"], loss.detach().view(1))
    loss.backward()
    for n in names:
        if "grad." + n not in s:
            print("%-28s missing from the dump FAIL" % ("grad." + n))
            failures.append("grad." + n)
            continue
        # Every parameter must matter to the loss, but attn.k.bias: it adds q . b_k to a
        # whole row of scores, which softmax ignores, so its gradient is 0 up to rounding
        # (both sides then agree within ATOL).
        if n != "attn.k.bias" and p[n].grad.abs().max().item() == 0:
            failures.append("grad.%s (all zero in torch)" % n)
        check("grad." + n, s["grad." + n], p[n].grad)
    if failures:
        print("attention_block_torch: %d checks failed: %s" % (len(failures), ", ".join(failures)))
        sys.exit(1)
    print("attention_block_torch: ok, %d parameters, loss %.12f (torch %s)"
          % (len(names), loss.item(), torch.__version__))


if __name__ == "__main__":
    main()
