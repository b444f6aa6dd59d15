//! Key groups: a stable hash of key columns, and Flink's key-group → subtask formula.
//!
//! Keyed state is partitioned into `max_parallelism` key groups; a key group is the
//! unit that moves between subtasks when a job is restored at another parallelism.
//! The hash must therefore be the same on every machine, in every process and in
//! every version of weir that reads a given checkpoint: it is defined here, column
//! by column, and never delegated to a hasher whose output may change (such as
//! `ahash`, which DataFusion uses for its in-memory tables).

use std::ops::RangeInclusive;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, SortField};
use xxhash_rust::xxh3::xxh3_64;

use crate::{Error, Result};

/// The default number of key groups (Flink's default max parallelism for small jobs).
pub const DEFAULT_MAX_PARALLELISM: usize = 128;

const NULL_HASH: u64 = 0x243F_6A88_85A3_08D3;
const ROW_SEED: u64 = 0x9E37_79B9_7F4A_7C15;

/// The murmur3 64-bit finalizer: a fast, well-mixing bijection on u64.
#[inline]
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

#[inline]
fn combine(row: u64, value: u64) -> u64 {
    (row.rotate_left(23) ^ value).wrapping_mul(ROW_SEED)
}

/// Hashes the rows of `columns` (all of equal length) into `hashes`, stably.
///
/// Equal key values hash equally whatever their physical encoding: a string
/// hashes the same in `Utf8`, `LargeUtf8` and `Utf8View`.
pub fn hash_rows(columns: &[ArrayRef], hashes: &mut Vec<u64>) -> Result<()> {
    let rows = columns.first().map_or(0, |c| c.len());
    hashes.clear();
    hashes.resize(rows, ROW_SEED);
    for column in columns {
        hash_column(column, hashes)?;
    }
    for h in hashes.iter_mut() {
        *h = fmix64(*h);
    }
    Ok(())
}

macro_rules! hash_primitive {
    ($column:expr, $hashes:expr, $t:ty, $to_u64:expr) => {{
        let array = $column.as_primitive::<$t>();
        let to_u64 = $to_u64;
        if array.null_count() == 0 {
            for (h, v) in $hashes.iter_mut().zip(array.values().iter()) {
                *h = combine(*h, fmix64(to_u64(*v)));
            }
        } else {
            for (i, h) in $hashes.iter_mut().enumerate() {
                let v = if array.is_null(i) {
                    NULL_HASH
                } else {
                    fmix64(to_u64(array.value(i)))
                };
                *h = combine(*h, v);
            }
        }
    }};
}

fn hash_bytes<'a>(hashes: &mut [u64], values: impl Iterator<Item = Option<&'a [u8]>>) {
    for (h, v) in hashes.iter_mut().zip(values) {
        *h = combine(*h, v.map_or(NULL_HASH, xxh3_64));
    }
}

fn hash_column(column: &ArrayRef, hashes: &mut [u64]) -> Result<()> {
    use arrow::datatypes::*;
    match column.data_type() {
        DataType::Int8 => hash_primitive!(column, hashes, Int8Type, |v: i8| v as i64 as u64),
        DataType::Int16 => hash_primitive!(column, hashes, Int16Type, |v: i16| v as i64 as u64),
        DataType::Int32 => hash_primitive!(column, hashes, Int32Type, |v: i32| v as i64 as u64),
        DataType::Int64 => hash_primitive!(column, hashes, Int64Type, |v: i64| v as u64),
        DataType::UInt8 => hash_primitive!(column, hashes, UInt8Type, |v: u8| v as u64),
        DataType::UInt16 => hash_primitive!(column, hashes, UInt16Type, |v: u16| v as u64),
        DataType::UInt32 => hash_primitive!(column, hashes, UInt32Type, |v: u32| v as u64),
        DataType::UInt64 => hash_primitive!(column, hashes, UInt64Type, |v: u64| v),
        DataType::Float32 => {
            hash_primitive!(column, hashes, Float32Type, |v: f32| float_bits(v as f64))
        }
        DataType::Float64 => hash_primitive!(column, hashes, Float64Type, float_bits),
        DataType::Date32 => hash_primitive!(column, hashes, Date32Type, |v: i32| v as i64 as u64),
        DataType::Date64 => hash_primitive!(column, hashes, Date64Type, |v: i64| v as u64),
        DataType::Timestamp(unit, _) => match unit {
            // Every unit hashes its raw value: the unit is part of the key's type.
            TimeUnit::Second => {
                hash_primitive!(column, hashes, TimestampSecondType, |v: i64| v as u64)
            }
            TimeUnit::Millisecond => {
                hash_primitive!(column, hashes, TimestampMillisecondType, |v: i64| v as u64)
            }
            TimeUnit::Microsecond => {
                hash_primitive!(column, hashes, TimestampMicrosecondType, |v: i64| v as u64)
            }
            TimeUnit::Nanosecond => {
                hash_primitive!(column, hashes, TimestampNanosecondType, |v: i64| v as u64)
            }
        },
        DataType::Decimal128(_, _) => {
            hash_primitive!(column, hashes, Decimal128Type, |v: i128| (v as u64)
                ^ fmix64((v >> 64) as u64))
        }
        DataType::Boolean => {
            let array = column.as_boolean();
            for (h, v) in hashes.iter_mut().zip(array.iter()) {
                let v = v.map_or(NULL_HASH, |b| fmix64(b as u64 + 1));
                *h = combine(*h, v);
            }
        }
        DataType::Utf8 => hash_bytes(
            hashes,
            column.as_string::<i32>().iter().map(|v| v.map(str::as_bytes)),
        ),
        DataType::LargeUtf8 => hash_bytes(
            hashes,
            column.as_string::<i64>().iter().map(|v| v.map(str::as_bytes)),
        ),
        DataType::Utf8View => hash_bytes(
            hashes,
            column.as_string_view().iter().map(|v| v.map(str::as_bytes)),
        ),
        DataType::Binary => hash_bytes(hashes, column.as_binary::<i32>().iter()),
        DataType::LargeBinary => hash_bytes(hashes, column.as_binary::<i64>().iter()),
        DataType::BinaryView => hash_bytes(hashes, column.as_binary_view().iter()),
        DataType::Dictionary(_, value_type) => {
            let plain = arrow::compute::cast(column, value_type)?;
            hash_column(&plain, hashes)?;
        }
        other if other.is_nested() => {
            // Nested keys (rows, arrays) hash through Arrow's row format, which is a
            // documented, order-preserving byte encoding of the value.
            let converter = RowConverter::new(vec![SortField::new(other.clone())])?;
            let rows = converter.convert_columns(std::slice::from_ref(column))?;
            for (i, h) in hashes.iter_mut().enumerate() {
                let value = if column.is_null(i) {
                    NULL_HASH
                } else {
                    xxh3_64(rows.row(i).as_ref())
                };
                *h = combine(*h, value);
            }
        }
        other => {
            return Err(Error::Plan(format!(
                "a column of type {other} cannot be used as a grouping or partitioning key"
            )));
        }
    }
    Ok(())
}

/// Bits of a float with all NaNs and both zeros made equal, as SQL equality has them.
fn float_bits(v: f64) -> u64 {
    if v.is_nan() {
        f64::NAN.to_bits()
    } else if v == 0.0 {
        0
    } else {
        v.to_bits()
    }
}

/// The key group of a hash.
#[inline]
pub fn key_group(hash: u64, max_parallelism: usize) -> usize {
    (hash % max_parallelism as u64) as usize
}

/// The subtask that owns a key group (Flink's `computeOperatorIndexForKeyGroup`).
#[inline]
pub fn subtask_for_key_group(key_group: usize, parallelism: usize, max_parallelism: usize) -> usize {
    key_group * parallelism / max_parallelism
}

/// The key groups a subtask owns (Flink's `computeKeyGroupRangeForOperatorIndex`).
pub fn key_group_range(subtask: usize, parallelism: usize, max_parallelism: usize) -> RangeInclusive<usize> {
    let start = (subtask * max_parallelism).div_ceil(parallelism);
    let end = ((subtask + 1) * max_parallelism - 1) / parallelism;
    start..=end
}

/// Checks a data type can be hashed as a key, so planning fails early and clearly.
pub fn check_key_type(data_type: &DataType) -> Result<()> {
    let empty = arrow::array::new_empty_array(data_type);
    hash_column(&empty, &mut [])
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, LargeStringArray, StringArray, StringViewArray};

    use super::*;

    fn hashes(columns: &[ArrayRef]) -> Vec<u64> {
        let mut out = Vec::new();
        hash_rows(columns, &mut out).unwrap();
        out
    }

    #[test]
    fn hash_is_stable_across_runs_and_machines() {
        // Fixed expectations: a change here breaks restoring existing checkpoints.
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![0, 1, 42]));
        let strings: ArrayRef = Arc::new(StringArray::from(vec!["", "a", "weir"]));
        let h = hashes(std::slice::from_ref(&ints));
        assert_eq!(h, hashes(std::slice::from_ref(&ints)));
        assert_ne!(h[0], h[1]);
        let expected_key_groups: Vec<usize> = h.iter().map(|h| key_group(*h, 128)).collect();
        assert_eq!(expected_key_groups, vec![94, 113, 8]);
        let hs = hashes(&[strings]);
        let key_groups: Vec<usize> = hs.iter().map(|h| key_group(*h, 128)).collect();
        assert_eq!(key_groups, vec![87, 17, 114]);
    }

    #[test]
    fn string_encodings_hash_equally() {
        let a: ArrayRef = Arc::new(StringArray::from(vec![Some("x"), None, Some("yz")]));
        let b: ArrayRef = Arc::new(LargeStringArray::from(vec![Some("x"), None, Some("yz")]));
        let c: ArrayRef = Arc::new(StringViewArray::from(vec![Some("x"), None, Some("yz")]));
        assert_eq!(hashes(std::slice::from_ref(&a)), hashes(&[b]));
        assert_eq!(hashes(&[a]), hashes(&[c]));
    }

    #[test]
    fn key_group_ranges_cover_every_group_once() {
        for parallelism in 1..=7 {
            let mut owner = vec![usize::MAX; 128];
            for subtask in 0..parallelism {
                for kg in key_group_range(subtask, parallelism, 128) {
                    assert_eq!(owner[kg], usize::MAX, "key group {kg} owned twice");
                    owner[kg] = subtask;
                    assert_eq!(subtask_for_key_group(kg, parallelism, 128), subtask);
                }
            }
            assert!(owner.iter().all(|o| *o != usize::MAX));
        }
    }

    #[test]
    fn unsupported_key_type_is_a_clear_error() {
        let err = check_key_type(&DataType::Null).unwrap_err().to_string();
        assert!(err.contains("cannot be used as a grouping"), "{err}");
    }
}
