//! Safetensors headers: an 8-byte little-endian length, then a JSON object naming each tensor's
//! dtype, shape and byte range.

use std::io::Read;

use super::{read_exact, Array, Elem, Member, MAX_HEADER_BYTES};

/// The tensors a safetensors file declares, each with its header.
pub(super) fn header(r: &mut impl Read, size: u64) -> Result<Vec<Member>, String> {
    let truncated = |n: usize| format!("it is truncated inside its header ({n} bytes)");
    let len = read_exact(r, 8, truncated)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(&len);
    let len = u64::from_le_bytes(a);
    let data = size.saturating_sub(8).checked_sub(len).ok_or_else(|| {
        format!("it is not a safetensors file: its header declares {len} bytes, more than the file holds")
    })?;
    if len > MAX_HEADER_BYTES {
        return Err(format!(
            "its header declares {len} bytes, more than the {MAX_HEADER_BYTES} Kiln reads"
        ));
    }
    let text = read_exact(r, len, truncated)?;
    let json: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| format!("it is not a safetensors file: its header is not JSON ({e})"))?;
    let object = json
        .as_object()
        .ok_or("it is not a safetensors file: its header is not a JSON object")?;
    let mut out = Vec::with_capacity(object.len());
    for (name, info) in object {
        if name == "__metadata__" {
            continue;
        }
        out.push(Member {
            name: name.clone(),
            array: Some(tensor(name, info, data)),
        });
    }
    Ok(out)
}

/// One tensor's entry: `{"dtype": "F32", "shape": [3, 2], "data_offsets": [0, 24]}`.
fn tensor(name: &str, info: &serde_json::Value, data: u64) -> Result<Array, String> {
    let malformed = || format!("its header's entry for `{name}` is malformed");
    let dtype = info
        .get("dtype")
        .and_then(|d| d.as_str())
        .ok_or_else(malformed)?;
    let shape = info
        .get("shape")
        .and_then(|s| s.as_array())
        .ok_or_else(malformed)?
        .iter()
        .map(|d| d.as_u64().ok_or_else(malformed))
        .collect::<Result<Vec<u64>, String>>()?;
    let end = info
        .get("data_offsets")
        .and_then(|o| o.as_array())
        .and_then(|o| o.get(1))
        .and_then(|e| e.as_u64())
        .ok_or_else(malformed)?;
    if end > data {
        return Err(format!(
            "it is truncated: the tensor `{name}` ends at byte {end} of the data, which holds {data}"
        ));
    }
    let elem = match dtype {
        "BOOL" => Elem::Bool,
        "U8" => Elem::Int {
            signed: false,
            bits: 8,
        },
        "I8" => Elem::Int {
            signed: true,
            bits: 8,
        },
        "U16" => Elem::Int {
            signed: false,
            bits: 16,
        },
        "I16" => Elem::Int {
            signed: true,
            bits: 16,
        },
        "U32" => Elem::Int {
            signed: false,
            bits: 32,
        },
        "I32" => Elem::Int {
            signed: true,
            bits: 32,
        },
        "U64" => Elem::Int {
            signed: false,
            bits: 64,
        },
        "I64" => Elem::Int {
            signed: true,
            bits: 64,
        },
        "F16" | "BF16" => Elem::Float { bits: 16 },
        "F32" => Elem::Float { bits: 32 },
        "F64" => Elem::Float { bits: 64 },
        other => Elem::Other(other.to_string()),
    };
    Ok(Array { elem, shape })
}
