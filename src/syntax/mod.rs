//! Syntax: text to a syntax tree with spans, or a syntax diagnostic.
//!
//! Parsing never panics: a nesting pre-scan refuses inputs that would make the recursive-descent
//! parser recurse too deeply, and pest's call limit bounds the work on any input.

pub mod ast;
mod errors;
pub mod format;
mod parser;

pub use format::format;
pub use parser::parse;

/// The deepest bracket nesting the parser accepts.
pub const MAX_NESTING: usize = 64;

#[cfg(test)]
mod tests {
    use super::ast::ValueKind;
    use crate::span::FileId;

    /// The values of `place VALUE`, as the parser reads them.
    fn value(text: &str) -> Option<ValueKind> {
        let file = super::parse(FileId(0), &format!("place {text}")).ok()?;
        Some(file.statements[0].values[0].kind.clone())
    }

    #[test]
    fn dotted_paths_take_positions() {
        for path in [
            "encoder.1",
            "encoder.0.weight",
            "3.weight",
            "3.1.weight",
            "3.1.2",
            "1f1b",
        ] {
            assert_eq!(value(path), Some(ValueKind::Path(path.into())), "{path}");
        }
    }

    #[test]
    fn numbers_stay_numbers() {
        for (text, x) in [
            ("3", 3.0),
            ("3.5", 3.5),
            ("1e-3", 1e-3),
            ("10_000", 1e4),
            ("0.5e3", 500.0),
        ] {
            assert!(
                matches!(value(text), Some(ValueKind::Number { value, .. }) if value == x),
                "{text}: {:?}",
                value(text)
            );
        }
        assert!(matches!(
            value("1.5 GiB"),
            Some(ValueKind::Number { unit: Some(_), .. })
        ));
        assert_eq!(value("encoder.1abc"), None);
    }
}
