//! What the language reference says about a layer kind: its parameters in positional order with
//! their defaults, and the shapes it maps. The layer table of `docs/language.md` is generated
//! from these.

/// One parameter of a layer kind.
#[derive(Clone, Copy, Debug)]
pub struct Param {
    /// Its name, as written in `name: value`.
    pub name: &'static str,
    /// What happens when it is not given.
    pub default: Fallback,
}

/// The value a parameter takes when it is not given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// It must be given.
    Required,
    /// It is inferred from the input shape.
    Inferred,
    /// This value, as the language reference writes it.
    Value(&'static str),
}

/// What the language reference says about one layer kind.
#[derive(Debug)]
pub struct Spec {
    /// Parameters in positional order.
    pub params: &'static [Param],
    /// Another way of writing the arguments, if any (`linear(in -> out)`).
    pub note: Option<&'static str>,
    /// The input shapes it takes and the output shape it gives.
    pub shapes: &'static str,
}

pub(super) const fn required(name: &'static str) -> Param {
    Param {
        name,
        default: Fallback::Required,
    }
}

pub(super) const fn inferred(name: &'static str) -> Param {
    Param {
        name,
        default: Fallback::Inferred,
    }
}

pub(super) const fn given(name: &'static str, value: &'static str) -> Param {
    Param {
        name,
        default: Fallback::Value(value),
    }
}
