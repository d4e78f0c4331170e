//! Token streams: a flat binary file of unsigned ids (nanoGPT's `train.bin`), and raw UTF-8
//! text read as characters, whose vocabulary is the sorted set of its characters (Python's
//! `sorted(set(text))`: by code point).

use super::{Array, Elem};

/// The most text `kiln check` reads to find a text's vocabulary: 64 MiB. A larger text's
/// vocabulary is found when the run loads it.
pub const TEXT_CHECK_BYTES: u64 = 64 * 1024 * 1024;

/// What a text holds, as far as it was read.
#[derive(Clone, Debug, PartialEq)]
pub struct Text {
    /// Its characters; `None` when it is larger than [`TEXT_CHECK_BYTES`].
    pub chars: Option<u64>,
    /// Its vocabulary; `None` when it is larger than [`TEXT_CHECK_BYTES`].
    pub vocab: Option<Vec<char>>,
}

/// The vocabulary of a text: its distinct characters, sorted by code point.
pub fn vocabulary(text: &str) -> Vec<char> {
    let mut seen: Vec<char> = text.chars().collect();
    seen.sort_unstable();
    seen.dedup();
    seen
}

/// `bytes` as UTF-8 text, or why it is not: the byte offset of the first invalid sequence.
pub fn decode(bytes: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(bytes).map_err(|e| {
        format!(
            "it is not UTF-8 text: the bytes at offset {} are not a character",
            e.valid_up_to()
        )
    })
}

/// What a text of `size` bytes holds; `bytes` is the whole text when `size` is at most
/// [`TEXT_CHECK_BYTES`] (else it is not read).
pub fn header(bytes: Option<&[u8]>, size: u64) -> Result<Text, String> {
    if size == 0 {
        return Err("it is empty".into());
    }
    let Some(bytes) = bytes.filter(|_| size <= TEXT_CHECK_BYTES) else {
        return Ok(Text {
            chars: None,
            vocab: None,
        });
    };
    let text = decode(bytes)?;
    Ok(Text {
        chars: Some(text.chars().count() as u64),
        vocab: Some(vocabulary(text)),
    })
}

/// A token file of `size` bytes holding `bits`-bit unsigned ids: an array of `size / (bits /
/// 8)` ids, or why its length is not a whole number of them.
pub fn tokens(size: u64, bits: u8) -> Result<Array, String> {
    let width = u64::from(bits / 8).max(1);
    if !size.is_multiple_of(width) {
        return Err(format!(
            "its {size} bytes are not a whole number of {bits}-bit token ids ({} bytes over)",
            size % width
        ));
    }
    if size == 0 {
        return Err("it is empty".into());
    }
    Ok(Array {
        elem: Elem::Int {
            signed: false,
            bits,
        },
        shape: vec![size / width],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabularies_are_sorted_by_code_point() {
        assert_eq!(
            vocabulary("hello, World\n"),
            vec!['\n', ' ', ',', 'W', 'd', 'e', 'h', 'l', 'o', 'r']
        );
        assert_eq!(vocabulary("éa"), vec!['a', 'é']);
        let h = header(Some("abca".as_bytes()), 4).unwrap();
        assert_eq!(h.chars, Some(4));
        assert_eq!(h.vocab, Some(vec!['a', 'b', 'c']));
        let e = header(Some(&[b'a', 0xff, b'b']), 3).unwrap_err();
        assert!(e.contains("offset 1"), "{e}");
        assert!(header(Some(&[]), 0).is_err());
        assert_eq!(header(None, TEXT_CHECK_BYTES + 1).unwrap().vocab, None);
    }

    #[test]
    fn token_files_hold_whole_ids() {
        assert_eq!(tokens(10, 16).unwrap().shape, vec![5]);
        assert_eq!(tokens(12, 32).unwrap().shape, vec![3]);
        let e = tokens(11, 16).unwrap_err();
        assert!(e.contains("1 bytes over"), "{e}");
        assert!(tokens(0, 16).is_err());
    }
}
