//! Flink SQL data types as Arrow types: how each maps, how Flink spells
//! it, and how a time attribute is marked on its field.
//!
//! | Flink                                   | Arrow                                  |
//! |-----------------------------------------|----------------------------------------|
//! | `TINYINT` `SMALLINT` `INT` `BIGINT`     | `Int8` `Int16` `Int32` `Int64`          |
//! | `FLOAT` `DOUBLE`                        | `Float32` `Float64`                    |
//! | `DECIMAL(p, s)`                         | `Decimal128(p, s)`                     |
//! | `STRING` `VARCHAR(n)` `CHAR(n)`         | `Utf8`                                 |
//! | `BYTES` `VARBINARY(n)` `BINARY(n)`      | `Binary`                               |
//! | `DATE` `TIME`                           | `Date32` `Time32(ms)`                  |
//! | `TIMESTAMP(p)`                          | `Timestamp(unit of p, None)`           |
//! | `TIMESTAMP_LTZ(p)`                      | `Timestamp(unit of p, session zone)`   |
//! | `ROW<a T, ...>` `ARRAY<T>` `MAP<K, V>`  | `Struct` `List` `Map`                  |
//!
//! A `TIMESTAMP_LTZ` is an instant; the catalog stores it with the zone `UTC` and
//! the binder gives it the session's `table.local-time-zone`, which is what
//! decides how its values display and how windows over it align.

use std::sync::Arc;

use arrow::datatypes::{DataType, TimeUnit};

/// Field metadata key marking a time attribute column.
pub const TIME_ATTRIBUTE_KEY: &str = "weir.time_attribute";
/// Value of [`TIME_ATTRIBUTE_KEY`] for an event-time column.
pub const ROWTIME: &str = "rowtime";
/// Value of [`TIME_ATTRIBUTE_KEY`] for a processing-time column.
pub const PROCTIME: &str = "proctime";

/// The zone a `TIMESTAMP_LTZ` carries in the catalog, before binding.
pub const LTZ_CATALOG_ZONE: &str = "UTC";

/// The Arrow time unit for a timestamp precision (digits of fractional seconds).
pub fn unit_for_precision(precision: u64) -> TimeUnit {
    match precision {
        0..=3 => TimeUnit::Millisecond,
        4..=6 => TimeUnit::Microsecond,
        _ => TimeUnit::Nanosecond,
    }
}

/// Flink's `TIMESTAMP(3)`: the type of window bounds.
pub fn timestamp_ms() -> DataType {
    DataType::Timestamp(TimeUnit::Millisecond, None)
}

/// True for a `TIMESTAMP_LTZ` (any Arrow timestamp with a zone).
pub fn is_ltz(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Timestamp(_, Some(_)))
}

/// Gives every `TIMESTAMP_LTZ` inside `data_type` the zone `zone`.
pub fn with_zone(data_type: &DataType, zone: &str) -> DataType {
    match data_type {
        DataType::Timestamp(unit, Some(_)) => DataType::Timestamp(*unit, Some(zone.into())),
        DataType::Struct(fields) => DataType::Struct(
            fields
                .iter()
                .map(|f| Arc::new(f.as_ref().clone().with_data_type(with_zone(f.data_type(), zone))))
                .collect(),
        ),
        DataType::List(f) => DataType::List(Arc::new(
            f.as_ref().clone().with_data_type(with_zone(f.data_type(), zone)),
        )),
        other => other.clone(),
    }
}

/// How Flink spells an Arrow type (for DESCRIBE, EXPLAIN and error messages).
pub fn flink_type_name(data_type: &DataType) -> String {
    match data_type {
        DataType::Null => "NULL".into(),
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INT".into(),
        DataType::Int64 => "BIGINT".into(),
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            format!("{data_type}")
        }
        DataType::Float32 => "FLOAT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Decimal128(p, s) => format!("DECIMAL({p}, {s})"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "STRING".into(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "BYTES".into(),
        DataType::Date32 | DataType::Date64 => "DATE".into(),
        DataType::Time32(_) | DataType::Time64(_) => "TIME(0)".into(),
        DataType::Timestamp(unit, tz) => {
            let p = match unit {
                TimeUnit::Second => 0,
                TimeUnit::Millisecond => 3,
                TimeUnit::Microsecond => 6,
                TimeUnit::Nanosecond => 9,
            };
            if tz.is_some() {
                format!("TIMESTAMP_LTZ({p})")
            } else {
                format!("TIMESTAMP({p})")
            }
        }
        DataType::Struct(fields) => format!(
            "ROW<{}>",
            fields
                .iter()
                .map(|f| format!("`{}` {}", f.name(), flink_type_name(f.data_type())))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        DataType::List(f) | DataType::LargeList(f) => format!("ARRAY<{}>", flink_type_name(f.data_type())),
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => format!(
                "MAP<{}, {}>",
                flink_type_name(kv[0].data_type()),
                flink_type_name(kv[1].data_type())
            ),
            other => format!("{other}"),
        },
        DataType::Interval(_) => "INTERVAL".into(),
        other => format!("{other}"),
    }
}
