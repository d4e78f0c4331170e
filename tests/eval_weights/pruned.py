"""PyTorch's evaluation of a pruned model for `tests/eval_weights.rs`.

Usage: pruned.py SPEC.json

SPEC.json is the one `tests/eval/reference.py` reads ({"dir", "seed", "count", "batch", "split"}).
It builds the same model and data as that script, prunes `fc1.weight` with
`torch.nn.utils.prune.l1_unstructured(amount=0.5)` and `fc2.weight` with
`random_unstructured(amount=0.3)`, so their `state_dict` holds `weight_orig` and `weight_mask`
in place of `weight`, and writes into `dir`:
    pruned.safetensors    that state_dict (F32)
    data.safetensors      `inputs` [count, 12] float32, `targets` [count] int64
    pruned.json           {"val": {...}, "test": {...}}: loss, accuracy and top-2 accuracy of the
                          pruned model, evaluated in eval mode as Kiln evaluates
"""

import json
import os
import sys

import torch
import torch.nn.utils.prune as prune

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "support"))
sys.path.insert(0, os.path.join(HERE, os.pardir, "eval"))
from reference import Net, evaluate  # noqa: E402
from torchref import save_safetensors, splits  # noqa: E402


def main():
    spec = json.load(open(sys.argv[1]))
    torch.manual_seed(spec["seed"])
    model = Net()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
    prune.l1_unstructured(model.fc1, "weight", amount=0.5)
    prune.random_unstructured(model.fc2, "weight", amount=0.3)
    model.eval()
    state = model.state_dict()
    assert "fc1.weight_orig" in state and "fc1.weight_mask" in state and "fc1.weight" not in state
    count = spec["count"]
    inputs = torch.randn(count, 12)
    targets = torch.randint(0, 5, (count,))
    save_safetensors(f"{spec['dir']}/pruned.safetensors", state)
    save_safetensors(f"{spec['dir']}/data.safetensors", {"inputs": inputs, "targets": targets})
    _, val, test = splits(count, spec["split"], spec["seed"])
    result = {}
    for name, idx in (("val", val), ("test", test)):
        idx = torch.tensor(idx, dtype=torch.int64)
        result[name] = evaluate(model, inputs[idx], targets[idx], spec["batch"])
    json.dump(result, open(f"{spec['dir']}/pruned.json", "w"))


if __name__ == "__main__":
    main()
