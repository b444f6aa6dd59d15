//! The Flink SQL dialect for `sqlparser`: back-quoted identifiers and table arguments.
//!
//! Flink's window table functions take a table argument, `TUMBLE(TABLE bids, ...)`,
//! and `SESSION(TABLE bids PARTITION BY auction, ...)` (several keys in parentheses). sqlparser has no such
//! expression, so the dialect parses it into a marker function call,
//! `__weir_table_arg(bids, PARTITION BY keys...)`, which the window-TVF planner
//! (see [`super::window_tvf`]) takes apart again.

use std::any::TypeId;

use sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments, Ident, ObjectName,
    ObjectNamePart, TableFactor,
};
use sqlparser::dialect::{Dialect, GenericDialect};
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};

/// Name of the marker function a `TABLE t` argument is parsed into.
pub const TABLE_ARG_FUNCTION: &str = "__weir_table_arg";
/// Name of the marker function wrapping the `PARTITION BY` keys of a table argument.
pub const PARTITION_BY_FUNCTION: &str = "__weir_partition_by";

/// Flink's SQL dialect, as far as it differs from sqlparser's generic one.
#[derive(Debug, Default, Clone, Copy)]
pub struct FlinkDialect;

impl Dialect for FlinkDialect {
    /// Behave as the generic dialect wherever sqlparser checks the dialect's type.
    fn dialect(&self) -> TypeId {
        TypeId::of::<GenericDialect>()
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        ch == '`' || ch == '"'
    }

    fn is_identifier_start(&self, ch: char) -> bool {
        ch.is_alphabetic() || ch == '_' || ch == '$'
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        ch.is_alphanumeric() || ch == '_' || ch == '$'
    }

    fn supports_filter_during_aggregation(&self) -> bool {
        true
    }

    fn supports_group_by_expr(&self) -> bool {
        true
    }

    fn supports_named_fn_args_with_rarrow_operator(&self) -> bool {
        true
    }

    fn supports_window_function_null_treatment_arg(&self) -> bool {
        true
    }

    fn supports_struct_literal(&self) -> bool {
        true
    }

    /// `t FOR SYSTEM_TIME AS OF x.time` (temporal and lookup joins).
    fn supports_table_versioning(&self) -> bool {
        true
    }

    fn parse_prefix(&self, parser: &mut Parser) -> Option<Result<Expr, ParserError>> {
        if parser.peek_keyword(Keyword::TABLE) {
            Some(parse_table_argument(parser))
        } else {
            None
        }
    }
}

/// Parses `TABLE name [PARTITION BY expr, ...]` into the marker call.
fn parse_table_argument(parser: &mut Parser) -> Result<Expr, ParserError> {
    parser.expect_keyword_is(Keyword::TABLE)?;
    let name = parser.parse_object_name(false)?;
    let mut args = vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(
        Expr::CompoundIdentifier(
            name.0
                .into_iter()
                .filter_map(|part| match part {
                    ObjectNamePart::Identifier(ident) => Some(ident),
                    _ => None,
                })
                .collect(),
        ),
    ))];
    if parser.parse_keywords(&[Keyword::PARTITION, Keyword::BY]) {
        // One key, or several in parentheses: `PARTITION BY (a, b)`, as in Flink.
        let keys = if parser.consume_token(&sqlparser::tokenizer::Token::LParen) {
            let keys = parser.parse_comma_separated(Parser::parse_expr)?;
            parser.expect_token(&sqlparser::tokenizer::Token::RParen)?;
            keys
        } else {
            vec![parser.parse_expr()?]
        };
        args.push(FunctionArg::Unnamed(FunctionArgExpr::Expr(marker_call(
            PARTITION_BY_FUNCTION,
            keys.into_iter()
                .map(|k| FunctionArg::Unnamed(FunctionArgExpr::Expr(k)))
                .collect(),
        ))));
    }
    Ok(marker_call(TABLE_ARG_FUNCTION, args))
}

/// A reference to a table by name, as in `FROM name`.
pub fn table_factor(name: ObjectName) -> TableFactor {
    TableFactor::Table {
        name,
        alias: None,
        args: None,
        with_hints: vec![],
        version: None,
        with_ordinality: false,
        partitions: vec![],
        json_path: None,
        sample: None,
        index_hints: vec![],
    }
}

/// A plain function call expression `name(args...)`.
pub fn marker_call(name: &str, args: Vec<FunctionArg>) -> Expr {
    Expr::Function(Function {
        name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new(name))]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args,
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}
