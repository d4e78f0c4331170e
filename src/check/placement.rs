//! Where layers run: placements read from the file, and each layer's device from them.

use crate::ir::{Device, Node};
use crate::span::Span;

/// A layer or block placed on a device.
pub struct Placement {
    /// Qualified layer or block name.
    pub name: String,
    /// The device.
    pub device: Device,
    /// The placement's span.
    pub span: Span,
}

pub(super) fn place_nodes(nodes: &mut [Node], placements: &[Placement], default: Device) {
    fn device_for(name: &str, placements: &[Placement]) -> Option<Device> {
        // The most specific placement wins: the layer's own, else its innermost placed block.
        placements
            .iter()
            .filter(|p| within(name, &p.name))
            .max_by_key(|p| p.name.len())
            .map(|p| p.device)
    }
    for node in nodes {
        match node {
            Node::Layer(l) => l.device = device_for(&l.name, placements).unwrap_or(default),
            Node::Block { nodes, .. } | Node::Residual { nodes, .. } => {
                place_nodes(nodes, placements, default)
            }
        }
    }
}

/// Whether the qualified name `name` is `outer` or lies inside the block `outer`.
pub(super) fn within(name: &str, outer: &str) -> bool {
    name.strip_prefix(outer)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}
