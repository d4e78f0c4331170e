//! Token streams, `tokens(...)` and `text(...)`: one flat sequence of int64 ids held once, whose
//! samples are windows. Sample `i` of a split is the window of `block` ids at offset `i ·
//! stride` and its targets the `block` ids after each (nanoGPT's `get_batch`: `x = data[i:i+block]`,
//! `y = data[i+1:i+1+block]`). Training takes every offset (stride 1) in the epoch's random
//! order; validation and test walk consecutive windows (stride `block`).
//!
//! The splits are cut by position, as a language model's held-out text is its tail: training
//! takes the first `floor(f_train · n)` tokens, validation the next `floor(f_val · n)`, test the
//! next. A text's ids index its vocabulary, the sorted set of the training text's characters.

use std::path::Path;

use kiln::datafile::text::{decode, vocabulary};
use kiln::ir::{Data, Source};
use kiln::span::Span;
use tch::Tensor;

use super::error::{At, DataError};
use super::file::DataFile;
use super::{invalid, Dataset, Splits};

/// A stream as read: its ids and, for a text, its vocabulary.
struct Read {
    ids: Vec<i64>,
    vocab: Option<Vec<char>>,
    /// How messages name it.
    from: String,
}

/// Loads and splits a token stream.
pub(super) fn load(data: &Data, base: &Path) -> Result<Splits, DataError> {
    let span = data.source_span;
    let block = data.source.block().unwrap_or(1) as i64;
    let train = read(&data.source, None, base, span)?;
    let vocab = train.vocab.clone();
    let bound = bound(&data.source, data.token_vocab, vocab.as_deref());
    check_ids(&train, bound, span)?;
    let n = train.ids.len() as u64;
    let (t, v, s) = data.split.counts(n);
    let ids = Tensor::f_from_slice(&train.ids).at(span)?;
    let cut = |from: u64, len: u64| ids.f_narrow(0, from as i64, len as i64);
    let part = |from: u64, len: u64, stride: i64| -> Result<Option<Dataset>, DataError> {
        if len == 0 {
            return Ok(None);
        }
        Ok(Some(Dataset::stream(
            cut(from, len).at(span)?,
            block,
            stride,
        )))
    };
    let train_set = part(0, t, 1)?.filter(|d| d.len() > 0).ok_or_else(|| {
        invalid(
            span,
            format!(
                "the training split keeps {t} of the {n} tokens of {}, too few for one window of {block} and the token after it",
                train.from
            ),
            "no training window",
            "use a shorter `block`, a larger `train` fraction or more data",
        )
    })?;
    let mut splits = Splits {
        train: train_set,
        val: part(t, v, block)?,
        test: part(t + v, s, block)?,
        vocab: vocab.clone(),
    };
    for (name, own, slot) in [
        ("validation", &data.val, &mut splits.val),
        ("test", &data.test, &mut splits.test),
    ] {
        if let Some(own) = own {
            let read = read(&own.source, vocab.as_deref(), base, own.span)?;
            check_ids(&read, bound, own.span)?;
            let ids = Tensor::f_from_slice(&read.ids).at(own.span)?;
            *slot = Some(Dataset::stream(ids, block, block));
        }
        if slot.as_ref().is_some_and(|d| d.len() == 0) {
            return Err(invalid(
                span,
                format!("the {name} split holds too few tokens for one window of {block} and the token after it"),
                "no window",
                "use a shorter `block`, a larger fraction or more data",
            ));
        }
    }
    Ok(splits)
}

/// The exclusive bound of a stream's ids: the declared `vocab`, else the embedding's, else a
/// text's vocabulary.
fn bound(source: &Source, embedding: Option<u64>, text: Option<&[char]>) -> Option<u64> {
    match source {
        Source::Tokens { vocab, .. } => vocab.or(embedding),
        _ => embedding.or(text.map(|t| t.len() as u64)),
    }
}

/// Refuses the first id at or above `bound`.
fn check_ids(read: &Read, bound: Option<u64>, span: Span) -> Result<(), DataError> {
    let Some(bound) = bound else {
        return Ok(());
    };
    let Some((at, id)) = read
        .ids
        .iter()
        .enumerate()
        .find(|(_, &id)| id as u64 >= bound)
    else {
        return Ok(());
    };
    let (what, help) = match &read.vocab {
        Some(v) => (
            format!("{} distinct characters", v.len()),
            format!(
                "give the model's first layer {} ids, `embedding({}, ...)`, and its head as many classes",
                v.len(),
                v.len()
            ),
        ),
        None => (
            format!("the token id {id} at position {at}"),
            format!("token ids must lie in [0, {bound}): raise the vocabulary (`vocab`, the embedding's `num_embeddings`) or fix the file"),
        ),
    };
    Err(invalid(
        span,
        format!(
            "{} holds {what}, outside the vocabulary [0, {bound})",
            read.from
        ),
        "token id out of range",
        help,
    ))
}

/// Reads a stream's ids; a text is encoded with `vocab` when given (a split's own text, with
/// the training text's vocabulary), else with its own.
fn read(
    source: &Source,
    vocab: Option<&[char]>,
    base: &Path,
    span: Span,
) -> Result<Read, DataError> {
    match source {
        Source::Tokens { path, bits, .. } => {
            let file = DataFile::new(base, path);
            let bytes = file.read(span)?;
            let width = usize::from(*bits / 8);
            if !bytes.len().is_multiple_of(width) {
                return Err(invalid(
                    span,
                    format!(
                        "{} holds {} bytes, not a whole number of {bits}-bit token ids",
                        file.name(),
                        bytes.len()
                    ),
                    "odd file length",
                    format!("write the ids as `np.array(ids, dtype=np.uint{bits}).tofile(path)`, or declare the `dtype` they were written with"),
                )
                .path(&file.path));
            }
            let ids = match width {
                2 => bytes
                    .chunks_exact(2)
                    .map(|b| i64::from(u16::from_le_bytes([b[0], b[1]])))
                    .collect(),
                _ => bytes
                    .chunks_exact(4)
                    .map(|b| i64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                    .collect(),
            };
            Ok(Read {
                ids,
                vocab: None,
                from: file.name(),
            })
        }
        Source::Text { path, .. } => {
            let (bytes, from) = text_bytes(base, path, span)?;
            let text = decode(&bytes).map_err(|why| {
                invalid(
                    span,
                    format!("{from} cannot be read as text: {why}"),
                    "not UTF-8 text",
                    "save the text as UTF-8",
                )
            })?;
            let own;
            let vocab = match vocab {
                Some(v) => v,
                None => {
                    own = vocabulary(text);
                    &own
                }
            };
            let ids = encode(text, vocab).map_err(|c| {
                invalid(
                    span,
                    format!("{from} holds the character {c:?}, which the training text does not"),
                    "character outside the vocabulary",
                    "held-out text is encoded with the training text's characters; remove it or train on text that has it",
                )
            })?;
            Ok(Read {
                ids,
                vocab: Some(vocab.to_vec()),
                from,
            })
        }
        _ => Err(mixed(span)),
    }
}

/// K0503 for splits of which one is a token stream and another rows of samples.
pub(super) fn mixed(span: Span) -> DataError {
    invalid(
        span,
        "a split's own source and the training source must both be token streams (`tokens`, `text`) or both rows of samples",
        "token stream beside rows of samples",
        "give every split a source of the same kind as the training source",
    )
}

/// The ids of `text`'s characters in `vocab` (sorted), or the first character it lacks.
pub(crate) fn encode(text: &str, vocab: &[char]) -> Result<Vec<i64>, char> {
    let mut ascii = [-1i64; 128];
    for (i, &c) in vocab.iter().enumerate() {
        if c.is_ascii() {
            ascii[c as usize] = i as i64;
        }
    }
    text.chars()
        .map(|c| {
            let id = if c.is_ascii() {
                ascii[c as usize]
            } else {
                vocab.binary_search(&c).map_or(-1, |i| i as i64)
            };
            if id < 0 {
                Err(c)
            } else {
                Ok(id)
            }
        })
        .collect()
}

/// A text's bytes and its name in messages: a file, or a directory's files concatenated in
/// the order `kiln check` reads them.
fn text_bytes(base: &Path, path: &str, span: Span) -> Result<(Vec<u8>, String), DataError> {
    let file = DataFile::new(base, path);
    if !file.path.is_dir() {
        return Ok((file.read(span)?, file.name()));
    }
    let files = file.parts(kiln::check::text_files, "text files", span)?;
    let mut bytes = Vec::new();
    for f in &files {
        bytes.extend(f.read(span)?);
    }
    Ok((
        bytes,
        format!("the {} files of {}", files.len(), file.name()),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{data, expect_failure, ints, Scratch};
    use super::*;
    use kiln::diagnostic::Code;
    use kiln::ir::{Shape, Targets};

    const BLOCK: u64 = 16;

    fn tokens(path: &str, bits: u8, vocab: Option<u64>) -> Data {
        let targets = Targets::Tokens {
            classes: vocab,
            shape: Shape(vec![BLOCK as i64]),
        };
        let source = Source::Tokens {
            path: path.into(),
            bits,
            block: BLOCK,
            vocab,
        };
        data(source, targets, (0.9, 0.1, 0.0))
    }

    /// What `tests/streams/nanogpt.py` reads from the files it writes into `dir`.
    fn reference(dir: &Path, offsets: &[i64]) -> serde_json::Value {
        let mut args = vec![
            dir.to_str().expect("utf-8 path").to_string(),
            BLOCK.to_string(),
        ];
        args.extend(offsets.iter().map(i64::to_string));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        crate::toolkit::python_json("stream windows", "tests/streams/nanogpt.py", &args)
    }

    fn list(v: &serde_json::Value) -> Vec<i64> {
        v.as_array()
            .expect("list")
            .iter()
            .map(|x| x.as_i64().expect("int"))
            .collect()
    }

    #[test]
    fn windows_and_targets_are_nanogpts_get_batch() {
        let dir = Scratch::new();
        let offsets = [0i64, 1, 17, 500, 882];
        let r = reference(&dir.0, &offsets);
        let splits = load(&tokens("train.bin", 16, None), &dir.0).unwrap();
        // Training: the first 900 of 1,000 ids, a window at every offset.
        let train = &splits.train;
        assert_eq!(ints(&train.inputs), list(&r["ids"])[..900].to_vec());
        assert_eq!(train.len(), 900 - BLOCK as i64);
        let index = Tensor::from_slice(&offsets);
        let (x, y) = train.gather(&index).unwrap();
        assert_eq!(x.size(), vec![offsets.len() as i64, BLOCK as i64]);
        for (k, w) in r["windows"].as_array().unwrap().iter().enumerate() {
            let k = k as i64;
            assert_eq!(ints(&x.get(k)), list(&w["x"]), "x at {}", w["offset"]);
            assert_eq!(ints(&y.get(k)), list(&w["y"]), "y at {}", w["offset"]);
        }
        // Validation: the last 100 ids, in consecutive windows; the last one needs the id
        // after it, so (100 - 16 - 1) / 16 + 1 = 6 windows.
        let val = splits.val.unwrap();
        assert_eq!(val.len(), 6);
        let (x, y) = val.gather(&Tensor::from_slice(&[0i64, 5])).unwrap();
        let ids = list(&r["ids"]);
        let b = BLOCK as usize;
        assert_eq!(ints(&x.get(1)), ids[900 + 5 * b..900 + 6 * b].to_vec());
        assert_eq!(ints(&y.get(0)), ids[901..901 + b].to_vec());
        // A part of a stream holds exactly its windows (an evaluation's share of the ranks).
        let part = val.part(2, 5).unwrap();
        assert_eq!(part.len(), 3);
        assert_eq!(
            ints(&part.gather(&Tensor::from_slice(&[0i64])).unwrap().0),
            ids[900 + 2 * b..900 + 3 * b].to_vec()
        );
        // uint32 ids, wider than uint16 and beyond int32.
        let wide = load(&tokens("wide.bin", 32, None), &dir.0).unwrap();
        assert_eq!(ints(&wide.train.inputs), list(&r["wide"])[..270].to_vec());
    }

    #[test]
    fn a_texts_vocabulary_is_sorted_set_of_its_characters() {
        let dir = Scratch::new();
        let r = reference(&dir.0, &[]);
        let text = Source::Text {
            path: "text".into(),
            block: BLOCK,
        };
        let d = data(text, Targets::Unknown, (1.0, 0.0, 0.0));
        let splits = load(&d, &dir.0).unwrap();
        let vocab: Vec<String> = splits.vocab.unwrap().iter().map(char::to_string).collect();
        let want: Vec<String> = r["vocab"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect();
        assert_eq!(vocab, want);
        assert_eq!(ints(&splits.train.inputs), list(&r["text_ids"]));
    }

    #[test]
    fn bad_streams_are_data_diagnostics() {
        let dir = Scratch::new();
        dir.write("odd.bin", &[1, 0, 2]);
        expect_failure(
            load(&tokens("odd.bin", 16, None), &dir.0),
            Code::DataInvalid,
            "3 bytes, not a whole number of 16-bit token ids",
        );
        dir.write("short.bin", &[1, 0, 2, 0]);
        expect_failure(
            load(&tokens("short.bin", 16, None), &dir.0),
            Code::DataInvalid,
            "too few for one window of 16",
        );
        let ids: Vec<u8> = (0u16..100).flat_map(u16::to_le_bytes).collect();
        dir.write("ids.bin", &ids);
        expect_failure(
            load(&tokens("ids.bin", 16, Some(50)), &dir.0),
            Code::DataInvalid,
            "the token id 50 at position 50, outside the vocabulary [0, 50)",
        );
        dir.write("latin1.txt", &[b'c', b'a', b'f', 0xe9]);
        let text = |path: &str| Source::Text {
            path: path.into(),
            block: 2,
        };
        expect_failure(
            load(
                &data(text("latin1.txt"), Targets::Unknown, (1.0, 0.0, 0.0)),
                &dir.0,
            ),
            Code::DataInvalid,
            "not UTF-8 text: the bytes at offset 3",
        );
        std::fs::create_dir(dir.path("empty")).unwrap();
        expect_failure(
            load(
                &data(text("empty"), Targets::Unknown, (1.0, 0.0, 0.0)),
                &dir.0,
            ),
            Code::DataInvalid,
            "holds no text files",
        );
        expect_failure(
            load(
                &data(text("none.txt"), Targets::Unknown, (1.0, 0.0, 0.0)),
                &dir.0,
            ),
            Code::DataMissing,
            "does not exist",
        );
    }
}
