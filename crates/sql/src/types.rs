//! Flink SQL data types parsed from tokens into Arrow types (the mapping is
//! in [`weir_common::types`]).

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, TimeUnit};

use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;
use weir_common::types::{LTZ_CATALOG_ZONE, unit_for_precision};

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

#[cfg(test)]
mod tests {
    use sqlparser::parser::Parser;

    use super::*;
    use crate::dialect::FlinkDialect;
    use weir_common::types::{flink_type_name, is_ltz};

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
