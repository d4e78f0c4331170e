//! Pruning masks, as `torch.nn.utils.prune` computes them.
