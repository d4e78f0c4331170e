//! The documentation stays in step with the code: the diagnostic table lists every code, and
//! the language reference's layer table is generated from the layer specs.

use kiln::check::layers::{spec, Fallback};
use kiln::diagnostic::{Code, Severity};
use kiln::ir::Kind;

fn read(path: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .expect(path)
}

#[test]
fn the_diagnostic_table_lists_every_code_once() {
    let doc = read("docs/diagnostics.md");
    let rows: Vec<Vec<String>> = doc
        .lines()
        .filter(|l| l.starts_with("| K"))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect();
    let expected: Vec<Vec<String>> = Code::ALL
        .iter()
        .map(|c| {
            let severity = match c.severity() {
                Severity::Error => "error",
                Severity::Warning => "warning",
            };
            vec![
                c.code().to_string(),
                c.name().to_string(),
                severity.to_string(),
                c.summary().to_string(),
            ]
        })
        .collect();
    assert_eq!(
        rows, expected,
        "docs/diagnostics.md's table differs from src/diagnostic/codes.rs"
    );
    for c in Code::ALL {
        assert!(
            doc.contains(&format!("### {} {}", c.code(), c.name())),
            "no section for {}",
            c.code()
        );
    }
}

#[test]
fn codes_are_unique_and_well_formed() {
    let mut seen = std::collections::HashSet::new();
    for c in Code::ALL {
        assert!(seen.insert(c.code()), "{} used twice", c.code());
        assert!(c.code().len() == 5 && c.code().starts_with('K'));
        assert!(c.summary().ends_with('.'));
    }
}

/// The layer table of the language reference, rendered from the checker's specs: one row per
/// kind, its parameters in positional order with their defaults, and the shapes it maps.
fn layer_table() -> String {
    let mut out = String::from(
        "| layer | parameters (positional order, defaults) | input -> output |\n|---|---|---|\n",
    );
    for kind in Kind::ALL {
        let spec = spec(*kind);
        let mut params: Vec<String> = spec
            .params
            .iter()
            .map(|p| match p.default {
                Fallback::Required => format!("`{}`", p.name),
                Fallback::Inferred => format!("`{}` (inferred)", p.name),
                Fallback::Value(v) => format!("`{}` ({v})", p.name),
            })
            .collect();
        if params.is_empty() {
            params.push("none".to_string());
        }
        let mut text = params.join(", ");
        if let Some(note) = spec.note {
            text = format!("{text}; {note}");
        }
        out.push_str(&format!("| `{kind}` | {text} | {} |\n", spec.shapes));
    }
    out
}

/// The language reference's layer table is generated from the specs in `src/check/layers/`
/// (rewrite it with `KILN_BLESS=1 cargo test --release --test docs`).
#[test]
fn the_layer_table_is_generated_from_the_specs() {
    const START: &str = "<!-- layer table: generated from src/check/layers by tests/docs.rs -->\n";
    const END: &str = "<!-- end of layer table -->";
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/language.md");
    let doc = read("docs/language.md");
    let start = doc
        .find(START)
        .expect("docs/language.md has no layer table marker")
        + START.len();
    let end = doc[start..]
        .find(END)
        .expect("the layer table has no end marker")
        + start;
    let table = layer_table();
    if std::env::var_os("KILN_BLESS").is_some() {
        let updated = format!("{}{table}{}", &doc[..start], &doc[end..]);
        std::fs::write(&path, updated).expect("docs/language.md");
        return;
    }
    assert_eq!(
        &doc[start..end],
        table,
        "docs/language.md's layer table differs from the specs; rebless with KILN_BLESS=1"
    );
}
