//! A Parquet column's values on their way from the `parquet` crate's column readers into a
//! tensor: how a shard stores them, the tensor's element type, and the conversion of each
//! decoded chunk into its place.

use kiln::datafile::Elem;
use parquet::basic::Type as Physical;
use parquet::column::reader::{ColumnReader, ColumnReaderImpl};
use parquet::data_type::{DataType as ParquetType, DoubleType, FloatType, Int32Type, Int64Type};
use tch::Tensor;

/// How a shard stores a column's values (its Parquet physical type, and whether the Arrow
/// type reads the integers as unsigned).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Stored {
    Int32 { unsigned: bool },
    Int64 { unsigned: bool },
    Float32,
    Float64,
}

impl Stored {
    /// How values of type `elem` are stored in a column of physical type `physical`.
    pub(super) fn of(elem: &Elem, physical: Physical) -> Option<Stored> {
        Some(match (elem, physical) {
            (
                Elem::Int {
                    signed,
                    bits: ..=32,
                },
                Physical::INT32,
            ) => Stored::Int32 { unsigned: !signed },
            (Elem::Int { signed, bits: 64 }, Physical::INT64) => {
                Stored::Int64 { unsigned: !signed }
            }
            (Elem::Float { bits: 32 }, Physical::FLOAT) => Stored::Float32,
            (Elem::Float { bits: 64 }, Physical::DOUBLE) => Stored::Float64,
            _ => return None,
        })
    }

    pub(super) fn width(self) -> Width {
        match self {
            Stored::Int32 { .. } | Stored::Int64 { .. } => Width::Int,
            Stored::Float32 => Width::F32,
            Stored::Float64 => Width::F64,
        }
    }
}

/// The element type of a column's tensor: int64 when every shard holds integers, else the
/// widest float (ordered narrowest first).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Width {
    Int,
    F32,
    F64,
}

impl Width {
    pub(super) fn kind(self) -> tch::Kind {
        match self {
            Width::Int => tch::Kind::Int64,
            Width::F32 => tch::Kind::Float,
            Width::F64 => tch::Kind::Double,
        }
    }
}

/// One column's rows of a shard within the column's tensor.
pub(super) enum Out<'a> {
    Int(&'a mut [i64]),
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
}

/// A chunk of values as a column reader decoded them.
pub(super) enum Read<'v> {
    Int32(&'v [i32], bool),
    Int64(&'v [i64], bool),
    Float32(&'v [f32]),
    Float64(&'v [f64]),
}

/// `dst[i] = f(src[i])`.
fn convert<S: Copy, D>(dst: &mut [D], src: &[S], f: impl Fn(S) -> D) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f(s);
    }
}

impl<'a> Out<'a> {
    /// A view of a new contiguous CPU tensor of `width`'s kind.
    ///
    /// # Safety
    /// `t` is contiguous, on the CPU, of `width.kind()`, and nothing else reads or writes its
    /// elements while the view lives.
    pub(super) unsafe fn of(t: &'a mut Tensor, width: Width) -> Out<'a> {
        unsafe fn slice<T>(t: &mut Tensor) -> &mut [T] {
            let n = t.numel();
            if n == 0 {
                return &mut [];
            }
            // SAFETY: the caller's contract: `n` elements of `T` at the tensor's data pointer.
            unsafe { std::slice::from_raw_parts_mut(t.data_ptr() as *mut T, n) }
        }
        // SAFETY: the caller's contract, element types paired with `width.kind()`.
        unsafe {
            match width {
                Width::Int => Out::Int(slice(t)),
                Width::F32 => Out::F32(slice(t)),
                Width::F64 => Out::F64(slice(t)),
            }
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Out::Int(s) => s.len(),
            Out::F32(s) => s.len(),
            Out::F64(s) => s.len(),
        }
    }

    /// The first `n` values, leaving the rest in `self`.
    pub(super) fn take(&mut self, n: usize) -> Out<'a> {
        fn cut<'b, T>(s: &mut &'b mut [T], n: usize) -> &'b mut [T] {
            let (head, tail) = std::mem::take(s).split_at_mut(n);
            *s = tail;
            head
        }
        match self {
            Out::Int(s) => Out::Int(cut(s, n)),
            Out::F32(s) => Out::F32(cut(s, n)),
            Out::F64(s) => Out::F64(cut(s, n)),
        }
    }

    /// Writes `values` from position `at`, converted to the tensor's type; `false` when they
    /// do not fit.
    pub(super) fn put(&mut self, at: usize, values: Read) -> bool {
        let n = match values {
            Read::Int32(v, _) => v.len(),
            Read::Int64(v, _) => v.len(),
            Read::Float32(v) => v.len(),
            Read::Float64(v) => v.len(),
        };
        if at + n > self.len() {
            return false;
        }
        match (self, values) {
            (Out::Int(d), Read::Int32(s, false)) => convert(&mut d[at..], s, i64::from),
            (Out::Int(d), Read::Int32(s, true)) => {
                convert(&mut d[at..], s, |x| i64::from(x as u32))
            }
            (Out::Int(d), Read::Int64(s, _)) => d[at..at + n].copy_from_slice(s),
            (Out::F32(d), Read::Int32(s, false)) => convert(&mut d[at..], s, |x| x as f32),
            (Out::F32(d), Read::Int32(s, true)) => convert(&mut d[at..], s, |x| x as u32 as f32),
            (Out::F32(d), Read::Int64(s, false)) => convert(&mut d[at..], s, |x| x as f32),
            (Out::F32(d), Read::Int64(s, true)) => convert(&mut d[at..], s, |x| x as u64 as f32),
            (Out::F32(d), Read::Float32(s)) => d[at..at + n].copy_from_slice(s),
            (Out::F64(d), Read::Int32(s, false)) => convert(&mut d[at..], s, f64::from),
            (Out::F64(d), Read::Int32(s, true)) => {
                convert(&mut d[at..], s, |x| f64::from(x as u32))
            }
            (Out::F64(d), Read::Int64(s, false)) => convert(&mut d[at..], s, |x| x as f64),
            (Out::F64(d), Read::Int64(s, true)) => convert(&mut d[at..], s, |x| x as u64 as f64),
            (Out::F64(d), Read::Float32(s)) => convert(&mut d[at..], s, f64::from),
            (Out::F64(d), Read::Float64(s)) => d[at..at + n].copy_from_slice(s),
            // The tensor's width is the widest of the shards' types.
            (Out::Int(_), Read::Float32(_) | Read::Float64(_))
            | (Out::F32(_), Read::Float64(_)) => return false,
        }
        true
    }
}

/// A column reader of one of the four physical types of numbers, with its chunk buffer.
struct Typed<T: ParquetType> {
    reader: ColumnReaderImpl<T>,
    values: Vec<T::T>,
    unsigned: bool,
    read: for<'v> fn(&'v [T::T], bool) -> Read<'v>,
}

/// A column chunk's values, read a chunk of records at a time.
pub(super) trait Chunks {
    /// Up to `records` more records' levels (appended to `def` and `rep`) and values; the
    /// records and levels read.
    fn next(
        &mut self,
        records: usize,
        def: &mut Vec<i16>,
        rep: &mut Vec<i16>,
    ) -> parquet::errors::Result<(usize, usize, Read<'_>)>;
}

impl<T: ParquetType> Chunks for Typed<T> {
    fn next(
        &mut self,
        records: usize,
        def: &mut Vec<i16>,
        rep: &mut Vec<i16>,
    ) -> parquet::errors::Result<(usize, usize, Read<'_>)> {
        self.values.clear();
        let (records, _, levels) =
            self.reader
                .read_records(records, Some(def), Some(rep), &mut self.values)?;
        Ok((records, levels, (self.read)(&self.values, self.unsigned)))
    }
}

/// A column reader of a column that `stored` says how it is stored; `None` when the reader is
/// of another type.
pub(super) fn chunks(reader: ColumnReader, stored: Stored) -> Option<Box<dyn Chunks>> {
    fn typed<T: ParquetType + 'static>(
        reader: ColumnReaderImpl<T>,
        unsigned: bool,
        read: for<'v> fn(&'v [T::T], bool) -> Read<'v>,
    ) -> Box<dyn Chunks> {
        Box::new(Typed {
            reader,
            values: Vec::new(),
            unsigned,
            read,
        })
    }
    Some(match (reader, stored) {
        (ColumnReader::Int32ColumnReader(r), Stored::Int32 { unsigned }) => {
            typed::<Int32Type>(r, unsigned, |v, u| Read::Int32(v, u))
        }
        (ColumnReader::Int64ColumnReader(r), Stored::Int64 { unsigned }) => {
            typed::<Int64Type>(r, unsigned, |v, u| Read::Int64(v, u))
        }
        (ColumnReader::FloatColumnReader(r), Stored::Float32) => {
            typed::<FloatType>(r, false, |v, _| Read::Float32(v))
        }
        (ColumnReader::DoubleColumnReader(r), Stored::Float64) => {
            typed::<DoubleType>(r, false, |v, _| Read::Float64(v))
        }
        _ => return None,
    })
}
