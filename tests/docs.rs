//! The documentation stays in step with the code: the diagnostic table lists every code, and
//! the language reference names every layer kind.

use kiln::diagnostic::{Code, Severity};

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

#[test]
fn the_language_reference_covers_every_layer_kind() {
    let doc = read("docs/language.md");
    for (kind, params) in kiln::check::LAYERS {
        assert!(
            doc.contains(&format!("`{kind}`")),
            "docs/language.md does not describe `{kind}`"
        );
        for p in *params {
            assert!(
                doc.contains(p),
                "docs/language.md does not mention `{kind}`'s parameter `{p}`"
            );
        }
    }
}
