//! Text for people, at the edge: the numbers every command writes the same way (counts with
//! thousands separators, bytes with a binary unit) and the plan as `kiln plan` prints it. The
//! plan ([`crate::plan`]) computes facts; this module words them for `kiln plan`, `kiln report`
//! and the diagnostics that quote sizes.

pub mod plan;

/// Formats bytes with a binary unit, as in `1.53 MiB`.
pub fn fmt_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = bytes as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{x:.2} {}", UNITS[u])
    }
}

/// Formats a count with thousands separators, as in `203,530`.
pub fn fmt_count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_count(1_234_567), "1,234,567");
        assert_eq!(fmt_count(12), "12");
        assert_eq!(fmt_bytes(1023), "1023 B");
        assert_eq!(fmt_bytes(1_605_632), "1.53 MiB");
    }
}
