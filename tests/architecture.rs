//! The module graph flows one way, as ARCHITECTURE.md draws it: no top-level module of the
//! library imports one that imports it back, and the typed experiment (`ir`) sits below every
//! stage, importing none of them.
//!
//! Imports are read from the source text: `crate::X` inside the library, `kiln::X` from the
//! binaries (`src/cli/`, `src/runtime/`, `src/bin/`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a source file belongs to (`src/check/cx.rs` -> `check`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    match first {
        "lib.rs" | "main.rs" => None,
        _ => Some(first.trim_end_matches(".rs").to_string()),
    }
}

/// The top-level modules named after `prefix::` in `text` (`crate::` or `kiln::`).
fn imports(text: &str, prefix: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices(prefix) {
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &text[i + prefix.len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if known.contains(&name) {
            out.insert(name);
        }
    }
    out
}

/// Which top-level module imports which.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(&src, f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        let text = std::fs::read_to_string(file).expect("source file");
        let mut deps = imports(&text, "crate::", &modules);
        deps.extend(imports(&text, "kiln::", &modules));
        deps.remove(&module);
        graph.entry(module).or_default().extend(deps);
    }
    graph
}

/// A cycle through `start`, if there is one.
fn cycle_from(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    fn walk(
        graph: &BTreeMap<String, BTreeSet<String>>,
        start: &str,
        path: &mut Vec<String>,
    ) -> bool {
        let here = path.last().cloned().unwrap_or_default();
        for next in graph.get(&here).into_iter().flatten() {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if path.contains(next) {
                continue;
            }
            path.push(next.clone());
            if walk(graph, start, path) {
                return true;
            }
            path.pop();
        }
        false
    }
    let mut path = vec![start.to_string()];
    walk(graph, start, &mut path).then_some(path)
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let graph = graph();
    for module in graph.keys() {
        if let Some(cycle) = cycle_from(&graph, module) {
            panic!("the module graph has a cycle: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn the_typed_experiment_is_below_every_stage() {
    let graph = graph();
    let ir = graph.get("ir").cloned().unwrap_or_default();
    let allowed: BTreeSet<String> = ["span".to_string()].into();
    assert!(
        ir.is_subset(&allowed),
        "ir imports {ir:?}; it may import only span"
    );
    for stage in ["check", "plan", "runtime"] {
        assert!(
            graph.get(stage).is_some_and(|deps| deps.contains("ir")),
            "{stage} does not read the typed experiment from ir"
        );
    }
    assert!(
        !graph.get("plan").is_some_and(|deps| deps.contains("check")),
        "plan imports check: costs are computed from the typed experiment alone"
    );
}

#[test]
fn data_file_headers_are_read_without_the_rest_of_the_crate() {
    // `datafile` is a leaf, as `rundir` is: it reads bytes and knows nothing of experiments.
    let graph = graph();
    for leaf in ["datafile", "rundir"] {
        let deps = graph.get(leaf).cloned().unwrap_or_default();
        assert!(
            deps.is_empty(),
            "{leaf} imports {deps:?}; it may import nothing"
        );
    }
    assert!(
        graph
            .get("check")
            .is_some_and(|deps| deps.contains("datafile")),
        "check does not read data headers through datafile"
    );
}

#[test]
fn the_graph_finds_a_planted_cycle() {
    // The cycle search itself, on a graph with a known cycle, so the tests above can fail.
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    graph.insert("a".into(), ["b".to_string()].into());
    graph.insert("b".into(), ["c".to_string()].into());
    graph.insert("c".into(), ["a".to_string()].into());
    assert_eq!(
        cycle_from(&graph, "a"),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    graph.insert("c".into(), BTreeSet::new());
    assert_eq!(cycle_from(&graph, "a"), None);
}

#[test]
fn the_language_server_sits_on_top_of_the_checker() {
    // `lsp` reads the checker's results and answers editors; only the command line starts it,
    // and like `kiln check` it never reaches libtorch (`runtime`).
    let graph = graph();
    for (module, deps) in &graph {
        assert!(
            module == "cli" || !deps.contains("lsp"),
            "{module} imports lsp; only the command line may"
        );
    }
    let lsp = graph.get("lsp").cloned().unwrap_or_default();
    assert!(lsp.contains("check"), "lsp does not check through check");
    assert!(!lsp.contains("runtime"), "lsp imports runtime");
}
