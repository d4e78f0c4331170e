//! The c10d shim is built against Debian's Gloo headers, which are not the exact revision of
//! the Gloo compiled into libtorch. That is safe only while the shim instantiates no Gloo type
//! (it holds pointers and calls functions libtorch exports): this guard fails when any Gloo
//! code, vtable or type information is defined in `kiln-runtime` itself.

use std::process::Command;

/// Gloo (or ProcessGroupGloo's store adapter) symbols defined in a binary.
fn gloo_definitions(binary: &str) -> Vec<String> {
    let out = Command::new("nm")
        .args(["-C", "--defined-only", binary])
        .output()
        .expect("nm runs");
    assert!(out.status.success(), "nm failed on {binary}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| defines_gloo(l))
        .map(str::to_string)
        .collect()
}

/// `nm`'s line defines a Gloo symbol: ` [TWVuBDRr] ((vtable|typeinfo|VTT) for )?(gloo::|
/// c10d::ProcessGroupGloo::GlooStore)`.
fn defines_gloo(line: &str) -> bool {
    let mut parts = line.splitn(3, ' ');
    let (_, kind, name) = match (parts.next(), parts.next(), parts.next()) {
        (Some(a), Some(k), Some(n)) => (a, k, n),
        _ => return false,
    };
    if !matches!(kind, "T" | "W" | "V" | "u" | "B" | "D" | "R" | "r") {
        return false;
    }
    let name = ["vtable for ", "typeinfo for ", "VTT for "]
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .unwrap_or(name);
    name.starts_with("gloo::") || name.starts_with("c10d::ProcessGroupGloo::GlooStore")
}

#[test]
fn kiln_runtime_defines_no_gloo_code() {
    let found = gloo_definitions(env!("CARGO_BIN_EXE_kiln-runtime"));
    assert!(
        found.is_empty(),
        "kiln-runtime defines {} Gloo symbols (the shim must not instantiate Gloo types):\n{}",
        found.len(),
        found[..found.len().min(10)].join("\n")
    );
}

#[test]
fn the_guard_sees_gloo_definitions() {
    assert!(defines_gloo(
        "0000000000001234 T gloo::transport::tcp::Pair::send()"
    ));
    assert!(defines_gloo(
        "0000000000001234 V vtable for c10d::ProcessGroupGloo::GlooStore"
    ));
    assert!(!defines_gloo(
        "0000000000001234 U gloo::transport::tcp::Pair::send()"
    ));
    assert!(!defines_gloo("0000000000001234 T kiln_group_new"));
}
