//! A finished run's final weights: `weights.safetensors`, the model's parameters and buffers under
//! their PyTorch `state_dict` names (what `kiln eval --weights` reads), beside a [`Sidecar`]
//! `weights.yaml` with the run's position, the plan's fingerprint and the tensors file's size and
//! CRC-32, as a checkpoint has. Every run writes them once, when it ends (the runtime writes the
//! tensors, which needs libtorch). Nothing is overwritten: when a name is taken (a run that ended,
//! failed before its report, and was resumed to its end again), the next version is written
//! (`weights-2.safetensors` with `weights-2.yaml`, ...). The sidecar is written last, so a
//! sidecar always names a complete file.

use std::path::{Path, PathBuf};

use super::checkpoint::{checksum, verify, Damaged, Sidecar};
use super::{write_yaml, Error, Op};

/// The first version's tensors file.
pub const WEIGHTS: &str = "weights.safetensors";

/// The file stem of the `n`th version (1-based): `weights`, `weights-2`, ...
fn stem(n: usize) -> String {
    if n == 1 {
        "weights".to_string()
    } else {
        format!("weights-{n}")
    }
}

/// The tensors files of the final weights in `dir`, oldest first, as far as they go.
pub fn versions(dir: &Path) -> Vec<String> {
    (1..)
        .map(|n| format!("{}.safetensors", stem(n)))
        .take_while(|name| dir.join(name).exists())
        .collect()
}

/// Publishes the tensors file `tmp` (written in `dir`) as the next free version of the final
/// weights, then writes its sidecar, `side` with the file's name, size and checksum; returns the
/// tensors file's path. The caller holds the run directory's lock, so no other process takes the
/// name between the look and the rename; an existing file is never replaced.
pub fn publish(dir: &Path, tmp: &Path, side: &Sidecar) -> Result<PathBuf, Error> {
    let n = versions(dir).len() + 1;
    let name = format!("{}.safetensors", stem(n));
    let path = dir.join(&name);
    let (bytes, crc) = checksum(tmp).map_err(|e| Error::new(Op::Read, tmp, e))?;
    std::fs::rename(tmp, &path).map_err(|e| Error::new(Op::Rename, tmp, e))?;
    let side = Sidecar {
        tensors: name,
        tensors_bytes: bytes,
        tensors_crc32: crc,
        ..side.clone()
    };
    write_yaml(dir, &format!("{}.yaml", stem(n)), &side)?;
    Ok(path)
}

/// The newest intact final weights in `dir` (their sidecar and tensors file), and the newer ones
/// found damaged; `None` when the run wrote none (it has not ended, or an older Kiln ran it).
pub fn newest(dir: &Path) -> (Option<(Sidecar, PathBuf)>, Vec<Damaged>) {
    let mut damaged = Vec::new();
    for n in (1..=versions(dir).len()).rev() {
        let meta = dir.join(format!("{}.yaml", stem(n)));
        if !meta.exists() {
            // A file whose sidecar was never written: its write did not finish.
            continue;
        }
        match verify(&meta) {
            Ok(found) => return (Some(found), damaged),
            Err(d) => damaged.push(d),
        }
    }
    (None, damaged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolkit::scratch;

    fn side() -> Sidecar {
        Sidecar {
            kiln: "test".into(),
            fingerprint: Default::default(),
            position: Default::default(),
            tensors: String::new(),
            tensors_bytes: 0,
            tensors_crc32: String::new(),
            history: Vec::new(),
        }
    }

    #[test]
    fn a_second_publish_writes_a_new_version_and_keeps_the_first() {
        let dir = scratch("weights-versions");
        let tmp = dir.join(".weights.safetensors.tmp");
        std::fs::write(&tmp, b"first").expect("write");
        let first = publish(&dir, &tmp, &side()).expect("publish");
        assert_eq!(first, dir.join("weights.safetensors"));
        std::fs::write(&tmp, b"second").expect("write");
        let second = publish(&dir, &tmp, &side()).expect("publish");
        assert_eq!(second, dir.join("weights-2.safetensors"));
        assert_eq!(std::fs::read(&first).expect("read"), b"first");
        assert!(!tmp.exists());
        let (found, damaged) = newest(&dir);
        let (s, path) = found.expect("intact");
        assert_eq!(
            (s.tensors.as_str(), path),
            ("weights-2.safetensors", second)
        );
        assert!(damaged.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn damaged_or_unfinished_versions_are_passed_over() {
        let dir = scratch("weights-damaged");
        let tmp = dir.join(".weights.safetensors.tmp");
        std::fs::write(&tmp, b"first").expect("write");
        publish(&dir, &tmp, &side()).expect("publish");
        std::fs::write(&tmp, b"second").expect("write");
        let second = publish(&dir, &tmp, &side()).expect("publish");
        std::fs::write(&second, b"changed").expect("damage");
        // A third whose sidecar was never written.
        std::fs::write(dir.join("weights-3.safetensors"), b"third").expect("write");
        let (found, damaged) = newest(&dir);
        assert_eq!(found.expect("intact").0.tensors, "weights.safetensors");
        assert_eq!(damaged.len(), 1);
        assert!(damaged[0].reason.contains("bytes"), "{:?}", damaged[0]);
        assert!(newest(&scratch("weights-none")).0.is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
