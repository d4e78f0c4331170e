//! Structured pruning made physical: pruned units removed from their layers and consumers.
