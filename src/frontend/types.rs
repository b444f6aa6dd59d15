//! Flink SQL data types: parsing them from tokens, mapping them to Arrow, and back.
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

use arrow::datatypes::{DataType, Field, Fields, TimeUnit};
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

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

/// Parses a Flink data type with an optional `NOT NULL` / `NULL` suffix.
/// Returns the type and whether it is nullable.
pub fn parse_type_with_nullability(parser: &mut Parser) -> Result<(DataType, bool), ParserError> {
    let mut pending_gt = 0;
    let data_type = parse_type(parser, &mut pending_gt)?;
    if pending_gt > 0 {
        return parser.expected("end of type", parser.peek_token());
    }
    Ok((data_type, parse_nullability(parser)))
}

fn parse_nullability(parser: &mut Parser) -> bool {
    if parser.parse_keywords(&[Keyword::NOT, Keyword::NULL]) {
        false
    } else {
        let _ = parser.parse_keyword(Keyword::NULL);
        true
    }
}

/// Parses one type. `pending_gt` counts `>` characters already consumed by a `>>`
/// token that closed an inner type (as in `ARRAY<ROW<a INT>>`).
fn parse_type(parser: &mut Parser, pending_gt: &mut usize) -> Result<DataType, ParserError> {
    let token = parser.next_token();
    let Token::Word(word) = &token.token else {
        return parser.expected("a data type", token);
    };
    let name = word.value.to_uppercase();
    let data_type = match name.as_str() {
        "TINYINT" => DataType::Int8,
        "SMALLINT" => DataType::Int16,
        "INT" | "INTEGER" => DataType::Int32,
        "BIGINT" => DataType::Int64,
        "BOOLEAN" | "BOOL" => DataType::Boolean,
        "FLOAT" | "REAL" => DataType::Float32,
        "DOUBLE" => {
            let _ = parser.parse_keyword(Keyword::PRECISION);
            DataType::Float64
        }
        "DECIMAL" | "DEC" | "NUMERIC" => {
            let (p, s) = parse_precision_scale(parser)?;
            let p = p.unwrap_or(10);
            let s = s.unwrap_or(0);
            if !(1..=38).contains(&p) || s > p {
                return Err(ParserError::ParserError(format!(
                    "DECIMAL precision must be 1..38 and scale at most the precision, got ({p}, {s}){}",
                    token.span.start
                )));
            }
            DataType::Decimal128(p as u8, s as i8)
        }
        "STRING" => DataType::Utf8,
        "VARCHAR" | "CHAR" | "CHARACTER" => {
            let _ = parser.parse_keyword(Keyword::VARYING);
            parse_precision_scale(parser)?;
            DataType::Utf8
        }
        "BYTES" => DataType::Binary,
        "VARBINARY" | "BINARY" => {
            parse_precision_scale(parser)?;
            DataType::Binary
        }
        "DATE" => DataType::Date32,
        "TIME" => {
            parse_precision_scale(parser)?;
            parse_without_time_zone(parser);
            DataType::Time32(TimeUnit::Millisecond)
        }
        "TIMESTAMP" => {
            let (p, _) = parse_precision_scale(parser)?;
            let unit = unit_for_precision(p.unwrap_or(6));
            if parser.parse_keywords(&[Keyword::WITH, Keyword::LOCAL, Keyword::TIME, Keyword::ZONE]) {
                DataType::Timestamp(unit, Some(LTZ_CATALOG_ZONE.into()))
            } else if parser.parse_keywords(&[Keyword::WITH, Keyword::TIME, Keyword::ZONE]) {
                return Err(ParserError::ParserError(format!(
                    "TIMESTAMP WITH TIME ZONE is not supported (as in Flink); use TIMESTAMP_LTZ{}",
                    token.span.start
                )));
            } else {
                parse_without_time_zone(parser);
                DataType::Timestamp(unit, None)
            }
        }
        "TIMESTAMP_LTZ" => {
            let (p, _) = parse_precision_scale(parser)?;
            DataType::Timestamp(unit_for_precision(p.unwrap_or(6)), Some(LTZ_CATALOG_ZONE.into()))
        }
        "ROW" => {
            let close = open_bracket(parser)?;
            let mut fields = Vec::new();
            loop {
                let name = parser.parse_identifier()?;
                let field_type = parse_type(parser, pending_gt)?;
                let nullable = if *pending_gt == 0 {
                    parse_nullability(parser)
                } else {
                    true
                };
                if *pending_gt == 0 && parser.parse_keyword(Keyword::COMMENT) {
                    parser.parse_literal_string()?;
                }
                fields.push(Field::new(name.value, field_type, nullable));
                if *pending_gt > 0 || !parser.consume_token(&Token::Comma) {
                    break;
                }
            }
            close_bracket(parser, close, pending_gt)?;
            DataType::Struct(Fields::from(fields))
        }
        "ARRAY" => {
            let close = open_bracket(parser)?;
            let element = parse_type(parser, pending_gt)?;
            let nullable = if *pending_gt == 0 {
                parse_nullability(parser)
            } else {
                true
            };
            close_bracket(parser, close, pending_gt)?;
            DataType::List(Arc::new(Field::new_list_field(element, nullable)))
        }
        "MAP" => {
            let close = open_bracket(parser)?;
            let key = parse_type(parser, pending_gt)?;
            parse_nullability(parser);
            parser.expect_token(&Token::Comma)?;
            let value = parse_type(parser, pending_gt)?;
            if *pending_gt == 0 {
                parse_nullability(parser);
            }
            close_bracket(parser, close, pending_gt)?;
            DataType::Map(
                Arc::new(Field::new(
                    "entries",
                    DataType::Struct(Fields::from(vec![
                        Field::new("key", key, false),
                        Field::new("value", value, true),
                    ])),
                    false,
                )),
                false,
            )
        }
        _ => {
            return Err(ParserError::ParserError(format!(
                "unknown or unsupported data type {}{}",
                word.value, token.span.start
            )));
        }
    };
    Ok(data_type)
}

fn parse_without_time_zone(parser: &mut Parser) {
    let _ = parser.parse_keywords(&[Keyword::WITHOUT, Keyword::TIME, Keyword::ZONE]);
}

/// Parses an optional `(p)` or `(p, s)`.
fn parse_precision_scale(parser: &mut Parser) -> Result<(Option<u64>, Option<u64>), ParserError> {
    if !parser.consume_token(&Token::LParen) {
        return Ok((None, None));
    }
    let p = parser.parse_literal_uint()?;
    let s = if parser.consume_token(&Token::Comma) {
        Some(parser.parse_literal_uint()?)
    } else {
        None
    };
    parser.expect_token(&Token::RParen)?;
    Ok((Some(p), s))
}

/// Opens `<` or `(` and returns the matching closing token.
fn open_bracket(parser: &mut Parser) -> Result<Token, ParserError> {
    if parser.consume_token(&Token::Lt) {
        Ok(Token::Gt)
    } else {
        parser.expect_token(&Token::LParen)?;
        Ok(Token::RParen)
    }
}

fn close_bracket(parser: &mut Parser, close: Token, pending_gt: &mut usize) -> Result<(), ParserError> {
    if close == Token::Gt {
        if *pending_gt > 0 {
            *pending_gt -= 1;
            return Ok(());
        }
        if parser.consume_token(&Token::ShiftRight) {
            *pending_gt += 1;
            return Ok(());
        }
    }
    parser.expect_token(&close).map(|_| ())
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

#[cfg(test)]
mod tests {
    use sqlparser::parser::Parser;

    use super::*;
    use crate::frontend::dialect::FlinkDialect;

    fn parse(sql: &str) -> Result<(DataType, bool), ParserError> {
        let dialect = FlinkDialect;
        let mut parser = Parser::new(&dialect).try_with_sql(sql)?;
        parse_type_with_nullability(&mut parser)
    }

    #[test]
    fn flink_type_names_map_to_arrow_types() {
        assert_eq!(parse("BIGINT").unwrap(), (DataType::Int64, true));
        assert_eq!(parse("INT NOT NULL").unwrap(), (DataType::Int32, false));
        assert_eq!(parse("STRING").unwrap().0, DataType::Utf8);
        assert_eq!(parse("VARCHAR(20)").unwrap().0, DataType::Utf8);
        assert_eq!(parse("DECIMAL(10, 2)").unwrap().0, DataType::Decimal128(10, 2));
        assert_eq!(
            parse("TIMESTAMP(3)").unwrap().0,
            DataType::Timestamp(TimeUnit::Millisecond, None)
        );
        assert_eq!(
            parse("TIMESTAMP").unwrap().0,
            DataType::Timestamp(TimeUnit::Microsecond, None)
        );
        assert!(is_ltz(&parse("TIMESTAMP_LTZ(3)").unwrap().0));
        assert!(is_ltz(&parse("TIMESTAMP(3) WITH LOCAL TIME ZONE").unwrap().0));
    }

    #[test]
    fn nested_types_parse_including_double_closing_brackets() {
        let (t, _) = parse("ARRAY<ROW<a INT, b STRING>>").unwrap();
        assert_eq!(flink_type_name(&t), "ARRAY<ROW<`a` INT, `b` STRING>>");
        let (t, _) = parse("ROW<x BIGINT, y ROW<z DOUBLE>>").unwrap();
        assert_eq!(flink_type_name(&t), "ROW<`x` BIGINT, `y` ROW<`z` DOUBLE>>");
        let (t, _) = parse("MAP<STRING, BIGINT>").unwrap();
        assert_eq!(flink_type_name(&t), "MAP<STRING, BIGINT>");
        let (t, _) = parse("ROW(a INT, b STRING)").unwrap();
        assert_eq!(flink_type_name(&t), "ROW<`a` INT, `b` STRING>");
    }

    #[test]
    fn unknown_type_names_the_type_and_position() {
        let err = parse("BIGNUM").unwrap_err().to_string();
        assert!(
            err.contains("BIGNUM") && err.contains("Line: 1, Column: 1"),
            "{err}"
        );
    }
}
