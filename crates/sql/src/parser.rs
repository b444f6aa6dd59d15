//! Splits SQL text into statements and parses Flink's own statements.
//!
//! Queries and `INSERT` go to sqlparser (with [`FlinkDialect`]); Flink's DDL
//! (`CREATE TABLE` with computed columns, `WATERMARK FOR` and `WITH (...)`),
//! `CREATE VIEW`, `DROP`, `SET`, `RESET` and `EXPLAIN` are parsed here with
//! sqlparser's token-level API, so one file can mix them freely.

use arrow::datatypes::DataType;
use sqlparser::ast::{Expr, Ident, ObjectName, ObjectNamePart, Query};
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Location, Token};

use crate::dialect::FlinkDialect;
use crate::types::parse_type_with_nullability;
use crate::{Error, Result};
use weir_common::error::Position;

/// One parsed statement with its text and where it starts.
#[derive(Debug, Clone)]
pub struct ParsedStatement {
    /// The statement.
    pub statement: Statement,
    /// Its source text, without the closing `;`.
    pub text: String,
    /// Where it starts in the whole input.
    pub position: Position,
}

/// A statement weir understands.
#[derive(Debug, Clone)]
pub enum Statement {
    /// `CREATE [TEMPORARY] TABLE`.
    CreateTable(Box<CreateTable>),
    /// `CREATE [TEMPORARY] VIEW name [(columns)] AS query`.
    CreateView(CreateView),
    /// `CREATE [TEMPORARY] [SYSTEM] FUNCTION [IF NOT EXISTS] name AS 'class'`:
    /// binds a name to a function registered from Rust (Flink names a class).
    CreateFunction {
        /// The SQL name.
        name: String,
        /// The implementation it names (a Java class in Flink).
        implementation: String,
    },
    /// `DROP [TEMPORARY] TABLE|VIEW [IF EXISTS] name`.
    Drop(Drop),
    /// `SET` (list) or `SET 'key' = 'value'`.
    Set {
        /// The key and value, or `None` to list the settings.
        assignment: Option<(String, String)>,
    },
    /// `RESET` (all) or `RESET 'key'`.
    Reset {
        /// The key, or `None` for all.
        key: Option<String>,
    },
    /// `EXPLAIN [CHANGELOG_MODE] [PLAN FOR] statement`.
    Explain {
        /// The statement explained.
        inner: Box<ParsedStatement>,
        /// `CHANGELOG_MODE`: show each node's row kinds.
        changelog_mode: bool,
    },
    /// A query (`SELECT`, `VALUES`, `WITH`, ...).
    Query(Box<Query>),
    /// `INSERT INTO table query`.
    Insert(Box<sqlparser::ast::Statement>),
    /// `SHOW TABLES | VIEWS | FUNCTIONS | JOBS`.
    Show(ShowWhat),
    /// `DESCRIBE name` / `DESC name`.
    Describe(String),
    /// `DESCRIBE JOB 'id'`: the job's tasks and their metrics.
    DescribeJob(String),
    /// `STOP JOB 'id' [WITH SAVEPOINT]`.
    StopJob {
        /// The job's id.
        id: String,
        /// Take a savepoint and end the job with it.
        savepoint: bool,
    },
    /// `[COMPILE AND EXECUTE | COMPILE] PLAN 'path' [IF NOT EXISTS] FOR INSERT ...`.
    CompilePlan {
        /// The plan file.
        path: String,
        /// Keep an existing file.
        if_not_exists: bool,
        /// The `INSERT` planned.
        insert: Box<ParsedStatement>,
        /// `COMPILE AND EXECUTE`: run the plan too.
        execute: bool,
    },
    /// `EXECUTE PLAN 'path'`: runs a plan file.
    ExecutePlan {
        /// The plan file.
        path: String,
    },
}

/// What `SHOW` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShowWhat {
    /// `SHOW TABLES`.
    Tables,
    /// `SHOW VIEWS`.
    Views,
    /// `SHOW FUNCTIONS`.
    Functions,
    /// `SHOW JOBS`.
    Jobs,
}

/// What `CREATE TABLE` declares.
#[derive(Debug, Clone)]
pub struct CreateTable {
    /// Table name (case-sensitive, as in Flink).
    pub name: String,
    /// `IF NOT EXISTS` was given.
    pub if_not_exists: bool,
    /// `TEMPORARY` was given.
    pub temporary: bool,
    /// Columns in declaration order.
    pub columns: Vec<ColumnSpec>,
    /// `WATERMARK FOR column AS expr`.
    pub watermark: Option<WatermarkSpec>,
    /// `PRIMARY KEY (...) NOT ENFORCED`.
    pub primary_key: Vec<String>,
    /// `PARTITIONED BY (...)`.
    pub partition_keys: Vec<String>,
    /// `WITH ('key' = 'value', ...)`, in order.
    pub options: Vec<(String, String)>,
}

/// A column of `CREATE TABLE`.
#[derive(Debug, Clone)]
pub enum ColumnSpec {
    /// Stored in the source: `name TYPE [NOT NULL]`.
    Physical {
        /// Column name.
        name: String,
        /// Its type.
        data_type: DataType,
        /// Whether NULL is allowed.
        nullable: bool,
        /// `METADATA [FROM 'key'] [VIRTUAL]`: the connector's metadata key
        /// and whether the column is virtual (read only).
        metadata: Option<(String, bool)>,
    },
    /// Computed from other columns: `name AS expr`.
    Computed {
        /// Column name.
        name: String,
        /// The expression.
        expr: Box<Expr>,
    },
}

impl ColumnSpec {
    /// The column's name.
    pub fn name(&self) -> &str {
        match self {
            ColumnSpec::Physical { name, .. } | ColumnSpec::Computed { name, .. } => name,
        }
    }
}

/// `WATERMARK FOR column AS expr`.
#[derive(Debug, Clone)]
pub struct WatermarkSpec {
    /// The rowtime column.
    pub column: String,
    /// The watermark expression over the row's columns.
    pub expr: Expr,
    /// Source text of the expression, for DESCRIBE and EXPLAIN.
    pub text: String,
}

/// `CREATE VIEW`.
#[derive(Debug, Clone)]
pub struct CreateView {
    /// View name.
    pub name: String,
    /// `IF NOT EXISTS` was given.
    pub if_not_exists: bool,
    /// `TEMPORARY` was given.
    pub temporary: bool,
    /// Optional column names.
    pub columns: Vec<String>,
    /// The defining query.
    pub query: Box<Query>,
}

/// `DROP TABLE` or `DROP VIEW`.
#[derive(Debug, Clone)]
pub struct Drop {
    /// True for a view.
    pub view: bool,
    /// The name.
    pub name: String,
    /// `IF EXISTS` was given.
    pub if_exists: bool,
}

/// Parses every statement of `sql`. Statements are separated by `;`.
pub fn parse_statements(sql: &str) -> Result<Vec<ParsedStatement>> {
    let dialect = FlinkDialect;
    let mut parser = Parser::new(&dialect).try_with_sql(sql).map_err(parser_error)?;
    let lines = LineIndex::new(sql);
    let mut statements = Vec::new();
    loop {
        while parser.consume_token(&Token::SemiColon) {}
        let start = parser.peek_token();
        if start.token == Token::EOF {
            break;
        }
        let statement = parse_one(&mut parser, sql, &lines).map_err(parser_error)?;
        let end = parser.peek_token();
        if end.token != Token::SemiColon && end.token != Token::EOF {
            return Err(parser_error(ParserError::ParserError(format!(
                "Expected: end of statement (;), found: {}{}",
                end.token, end.span.start
            ))));
        }
        let text = lines
            .slice(sql, start.span.start, end.span.start)
            .trim()
            .to_string();
        statements.push(ParsedStatement {
            statement,
            text,
            position: Position {
                line: start.span.start.line,
                column: start.span.start.column,
            },
        });
    }
    Ok(statements)
}

/// Flink's explain details after `EXPLAIN`: true when `CHANGELOG_MODE` is
/// among them. weir has no cost estimates or JSON plans: those are refused.
fn explain_details(parser: &mut Parser) -> Result<bool, ParserError> {
    let mut changelog_mode = false;
    loop {
        let token = parser.peek_token();
        let Token::Word(w) = &token.token else {
            return Ok(changelog_mode);
        };
        match w.value.to_ascii_uppercase().as_str() {
            "CHANGELOG_MODE" => changelog_mode = true,
            "ESTIMATED_COST" | "PLAN_ADVICE" | "JSON_EXECUTION_PLAN" => {
                return parser.expected("CHANGELOG_MODE (the only EXPLAIN detail weir has)", token);
            }
            _ => return Ok(changelog_mode),
        }
        parser.next_token();
        if !parser.consume_token(&Token::Comma) {
            return Ok(changelog_mode);
        }
    }
}

fn parse_one(parser: &mut Parser, sql: &str, lines: &LineIndex) -> Result<Statement, ParserError> {
    let first = parser.peek_token();
    match &first.token {
        Token::Word(w) if w.keyword == Keyword::CREATE => parse_create(parser, sql, lines),
        Token::Word(w) if w.keyword == Keyword::DROP => parse_drop(parser),
        Token::Word(w) if w.keyword == Keyword::SET => parse_set(parser),
        Token::Word(w) if w.keyword == Keyword::RESET => {
            parser.next_token();
            let key = match parser.peek_token().token {
                Token::SemiColon | Token::EOF => None,
                _ => Some(parser.parse_literal_string()?),
            };
            Ok(Statement::Reset { key })
        }
        Token::Word(w) if w.keyword == Keyword::SHOW => {
            parser.next_token();
            let what = parser.next_token();
            let what = match &what.token {
                Token::Word(w) if w.value.eq_ignore_ascii_case("TABLES") => ShowWhat::Tables,
                Token::Word(w) if w.value.eq_ignore_ascii_case("VIEWS") => ShowWhat::Views,
                Token::Word(w) if w.value.eq_ignore_ascii_case("FUNCTIONS") => ShowWhat::Functions,
                Token::Word(w) if w.value.eq_ignore_ascii_case("JOBS") => ShowWhat::Jobs,
                _ => return parser.expected("TABLES, VIEWS, FUNCTIONS or JOBS after SHOW", what),
            };
            Ok(Statement::Show(what))
        }
        Token::Word(w) if w.keyword == Keyword::DESCRIBE || w.keyword == Keyword::DESC => {
            parser.next_token();
            let is_job = matches!(&parser.peek_token().token, Token::Word(w) if w.value.eq_ignore_ascii_case("JOB"))
                && matches!(&parser.peek_nth_token(1).token, Token::SingleQuotedString(_));
            if is_job {
                parser.next_token();
                return Ok(Statement::DescribeJob(parser.parse_literal_string()?));
            }
            let name = parser.parse_object_name(false)?;
            Ok(Statement::Describe(
                name.0
                    .iter()
                    .map(|part| {
                        part.as_ident()
                            .map_or_else(|| part.to_string(), |i| i.value.clone())
                    })
                    .collect::<Vec<_>>()
                    .join("."),
            ))
        }
        Token::Word(w) if w.value.eq_ignore_ascii_case("STOP") => {
            parser.next_token();
            let job = parser.next_token();
            if !matches!(&job.token, Token::Word(w) if w.value.eq_ignore_ascii_case("JOB")) {
                return parser.expected("JOB after STOP", job);
            }
            let id = parser.parse_literal_string()?;
            let mut savepoint = false;
            while parser.parse_keyword(Keyword::WITH) {
                let what = parser.next_token();
                match &what.token {
                    Token::Word(w) if w.value.eq_ignore_ascii_case("SAVEPOINT") && !savepoint => {
                        savepoint = true
                    }
                    Token::Word(w) if w.value.eq_ignore_ascii_case("DRAIN") => {
                        return Err(ParserError::ParserError(format!(
                            "STOP JOB ... WITH DRAIN is not supported: weir stops with a savepoint \
                             without draining (open windows stay in the savepoint){}",
                            what.span.start
                        )));
                    }
                    _ => return parser.expected("SAVEPOINT after WITH", what),
                }
            }
            Ok(Statement::StopJob { id, savepoint })
        }
        Token::Word(w) if w.value.eq_ignore_ascii_case("COMPILE") || w.keyword == Keyword::EXECUTE => {
            parse_plan_statement(parser, sql, lines)
        }
        Token::Word(w) if w.keyword == Keyword::EXPLAIN => {
            parser.next_token();
            let changelog_mode = explain_details(parser)?;
            let _ = parser.parse_keywords(&[Keyword::PLAN, Keyword::FOR]);
            let start = parser.peek_token();
            let inner = parse_one(parser, sql, lines)?;
            if matches!(inner, Statement::Explain { .. }) {
                return parser.expected("a query or INSERT after EXPLAIN", start);
            }
            let end = parser.peek_token();
            Ok(Statement::Explain {
                changelog_mode,
                inner: Box::new(ParsedStatement {
                    statement: inner,
                    text: lines
                        .slice(sql, start.span.start, end.span.start)
                        .trim()
                        .to_string(),
                    position: Position {
                        line: start.span.start.line,
                        column: start.span.start.column,
                    },
                }),
            })
        }
        _ => match parser.parse_statement()? {
            sqlparser::ast::Statement::Query(query) => Ok(Statement::Query(query)),
            insert @ sqlparser::ast::Statement::Insert(_) => Ok(Statement::Insert(Box::new(insert))),
            other => Err(ParserError::ParserError(format!(
                "statement not supported: {}{}",
                first_words(&other.to_string()),
                first.span.start
            ))),
        },
    }
}

/// `COMPILE [AND EXECUTE] PLAN 'path' [IF NOT EXISTS] FOR INSERT ...` or
/// `EXECUTE PLAN 'path'`.
fn parse_plan_statement(parser: &mut Parser, sql: &str, lines: &LineIndex) -> Result<Statement, ParserError> {
    let compile =
        matches!(&parser.peek_token().token, Token::Word(w) if w.value.eq_ignore_ascii_case("COMPILE"));
    if compile {
        parser.next_token();
    }
    let execute = !compile || parser.parse_keywords(&[Keyword::AND, Keyword::EXECUTE]);
    if !compile {
        parser.expect_keyword(Keyword::EXECUTE)?;
    }
    parser.expect_keyword(Keyword::PLAN)?;
    let path = parser.parse_literal_string()?;
    if !compile {
        return Ok(Statement::ExecutePlan { path });
    }
    let if_not_exists = parser.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    parser.expect_keyword(Keyword::FOR)?;
    let start = parser.peek_token();
    let inner = parse_one(parser, sql, lines)?;
    if !matches!(inner, Statement::Insert(_)) {
        return parser.expected("an INSERT after COMPILE PLAN ... FOR", start);
    }
    let end = parser.peek_token();
    Ok(Statement::CompilePlan {
        path,
        if_not_exists,
        execute,
        insert: Box::new(ParsedStatement {
            statement: inner,
            text: lines
                .slice(sql, start.span.start, end.span.start)
                .trim()
                .to_string(),
            position: Position {
                line: start.span.start.line,
                column: start.span.start.column,
            },
        }),
    })
}

fn first_words(text: &str) -> String {
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

fn parse_set(parser: &mut Parser) -> Result<Statement, ParserError> {
    parser.next_token();
    if matches!(parser.peek_token().token, Token::SemiColon | Token::EOF) {
        return Ok(Statement::Set { assignment: None });
    }
    let key_token = parser.peek_token();
    let key = match key_token.token {
        Token::SingleQuotedString(_) => parser.parse_literal_string()?,
        _ => return parser.expected("a quoted key, as in SET 'parallelism.default' = '2'", key_token),
    };
    parser.expect_token(&Token::Eq)?;
    let value = parse_option_value(parser)?;
    Ok(Statement::Set {
        assignment: Some((key, value)),
    })
}

fn parse_option_value(parser: &mut Parser) -> Result<String, ParserError> {
    let token = parser.next_token();
    match token.token {
        Token::SingleQuotedString(s) => Ok(s),
        Token::Number(n, _) => Ok(n),
        Token::Word(w) if w.keyword == Keyword::TRUE || w.keyword == Keyword::FALSE => {
            Ok(w.value.to_lowercase())
        }
        _ => parser.expected("a quoted value", token),
    }
}

fn parse_create(parser: &mut Parser, sql: &str, lines: &LineIndex) -> Result<Statement, ParserError> {
    parser.expect_keyword_is(Keyword::CREATE)?;
    if parser.parse_keywords(&[Keyword::OR, Keyword::REPLACE]) {
        return parser.expected(
            "TABLE or VIEW (CREATE OR REPLACE is not supported)",
            parser.peek_token(),
        );
    }
    let temporary = parser.parse_keyword(Keyword::TEMPORARY);
    let _system = parser.parse_keyword(Keyword::SYSTEM);
    if parser.parse_keyword(Keyword::FUNCTION) {
        let _ = parser.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
        let name = parser.parse_identifier()?.value;
        parser.expect_keyword_is(Keyword::AS)?;
        let implementation = parser.parse_literal_string()?;
        if parser.parse_keyword(Keyword::LANGUAGE) {
            parser.parse_identifier()?;
        }
        return Ok(Statement::CreateFunction { name, implementation });
    }
    if parser.parse_keyword(Keyword::TABLE) {
        parse_create_table(parser, temporary, sql, lines).map(|t| Statement::CreateTable(Box::new(t)))
    } else if parser.parse_keyword(Keyword::VIEW) {
        let if_not_exists = parser.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
        let name = object_name(parser)?;
        let columns = if parser.consume_token(&Token::LParen) {
            let cols = parser.parse_comma_separated(|p| p.parse_identifier().map(|i| i.value))?;
            parser.expect_token(&Token::RParen)?;
            cols
        } else {
            vec![]
        };
        parser.expect_keyword_is(Keyword::AS)?;
        let query = parser.parse_query()?;
        Ok(Statement::CreateView(CreateView {
            name,
            if_not_exists,
            temporary,
            columns,
            query,
        }))
    } else {
        parser.expected("TABLE or VIEW after CREATE", parser.peek_token())
    }
}

/// A table or view name: one identifier, or `catalog.database.name` for Flink's
/// default catalog and database, of which only the last part is kept.
fn object_name(parser: &mut Parser) -> Result<String, ParserError> {
    let start = parser.peek_token();
    let name = parser.parse_object_name(false)?;
    resolve_object_name(&name).ok_or_else(|| {
        ParserError::ParserError(format!(
            "only tables of the default catalog and database are supported, got {name}{}",
            start.span.start
        ))
    })
}

/// The table name of an object name (see [`object_name`]).
pub fn resolve_object_name(name: &ObjectName) -> Option<String> {
    let parts: Vec<&Ident> = name
        .0
        .iter()
        .filter_map(|p| match p {
            ObjectNamePart::Identifier(i) => Some(i),
            _ => None,
        })
        .collect();
    match parts.as_slice() {
        [table] => Some(table.value.clone()),
        [db, table] if db.value == "default_database" => Some(table.value.clone()),
        [catalog, db, table] if catalog.value == "default_catalog" && db.value == "default_database" => {
            Some(table.value.clone())
        }
        _ => None,
    }
}

fn parse_create_table(
    parser: &mut Parser,
    temporary: bool,
    sql: &str,
    lines: &LineIndex,
) -> Result<CreateTable, ParserError> {
    let if_not_exists = parser.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = object_name(parser)?;
    parser.expect_token(&Token::LParen)?;
    let mut columns = Vec::new();
    let mut watermark = None;
    let mut primary_key = Vec::new();
    loop {
        let token = parser.peek_token();
        if parse_word(parser, "WATERMARK") {
            if watermark.is_some() {
                return Err(ParserError::ParserError(format!(
                    "only one WATERMARK definition is allowed{}",
                    token.span.start
                )));
            }
            parser.expect_keyword_is(Keyword::FOR)?;
            let column = parser.parse_identifier()?.value;
            parser.expect_keyword_is(Keyword::AS)?;
            let expr_start = parser.peek_token();
            let expr = parser.parse_expr()?;
            let expr_end = parser.peek_token();
            watermark = Some(WatermarkSpec {
                column,
                expr,
                text: lines
                    .slice(sql, expr_start.span.start, expr_end.span.start)
                    .trim()
                    .to_string(),
            });
        } else if parser.parse_keyword(Keyword::CONSTRAINT) || parser.peek_keyword(Keyword::PRIMARY) {
            if !parser.parse_keywords(&[Keyword::PRIMARY, Keyword::KEY]) {
                parser.parse_identifier()?;
                parser.expect_keywords(&[Keyword::PRIMARY, Keyword::KEY])?;
            }
            parser.expect_token(&Token::LParen)?;
            primary_key = parser.parse_comma_separated(|p| p.parse_identifier().map(|i| i.value))?;
            parser.expect_token(&Token::RParen)?;
            parser.expect_keywords(&[Keyword::NOT, Keyword::ENFORCED])?;
        } else {
            let column_name = parser.parse_identifier()?.value;
            if parser.parse_keyword(Keyword::AS) {
                let expr = parser.parse_expr()?;
                skip_comment(parser)?;
                columns.push(ColumnSpec::Computed {
                    name: column_name,
                    expr: Box::new(expr),
                });
            } else {
                let (data_type, mut nullable) = parse_type_with_nullability(parser)?;
                let metadata = if parser.parse_keyword(Keyword::METADATA) {
                    let key = if parser.parse_keyword(Keyword::FROM) {
                        parser.parse_literal_string()?
                    } else {
                        column_name.clone()
                    };
                    Some((key, parser.parse_keyword(Keyword::VIRTUAL)))
                } else {
                    None
                };
                if parser.parse_keywords(&[Keyword::PRIMARY, Keyword::KEY]) {
                    parser.expect_keywords(&[Keyword::NOT, Keyword::ENFORCED])?;
                    primary_key = vec![column_name.clone()];
                    nullable = false;
                }
                skip_comment(parser)?;
                columns.push(ColumnSpec::Physical {
                    name: column_name,
                    data_type,
                    nullable,
                    metadata,
                });
            }
        }
        if !parser.consume_token(&Token::Comma) {
            break;
        }
        // Flink allows no trailing comma, but a closing paren after one is a common slip.
        if parser.peek_token().token == Token::RParen {
            break;
        }
    }
    parser.expect_token(&Token::RParen)?;
    skip_comment(parser)?;
    let mut partition_keys = Vec::new();
    if parser.parse_keywords(&[Keyword::PARTITIONED, Keyword::BY]) {
        parser.expect_token(&Token::LParen)?;
        partition_keys = parser.parse_comma_separated(|p| p.parse_identifier().map(|i| i.value))?;
        parser.expect_token(&Token::RParen)?;
    }
    let mut options = Vec::new();
    if parser.parse_keyword(Keyword::WITH) {
        parser.expect_token(&Token::LParen)?;
        if !parser.consume_token(&Token::RParen) {
            options = parser.parse_comma_separated(|p| {
                let key_token = p.peek_token();
                let key = match key_token.token {
                    Token::SingleQuotedString(_) => p.parse_literal_string()?,
                    _ => return p.expected("a quoted option key", key_token),
                };
                p.expect_token(&Token::Eq)?;
                Ok((key, parse_option_value(p)?))
            })?;
            parser.expect_token(&Token::RParen)?;
        }
    }
    if parser.peek_keyword(Keyword::LIKE) || parser.peek_keyword(Keyword::AS) {
        return parser.expected(
            "end of CREATE TABLE (LIKE and AS SELECT are not supported yet)",
            parser.peek_token(),
        );
    }
    Ok(CreateTable {
        name,
        if_not_exists,
        temporary,
        columns,
        watermark,
        primary_key,
        partition_keys,
        options,
    })
}

/// Consumes an unquoted word that sqlparser does not know as a keyword.
fn parse_word(parser: &mut Parser, word: &str) -> bool {
    match &parser.peek_token().token {
        Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word) => {
            parser.next_token();
            true
        }
        _ => false,
    }
}

fn skip_comment(parser: &mut Parser) -> Result<(), ParserError> {
    if parser.parse_keyword(Keyword::COMMENT) {
        parser.parse_literal_string()?;
    }
    Ok(())
}

fn parse_drop(parser: &mut Parser) -> Result<Statement, ParserError> {
    parser.expect_keyword_is(Keyword::DROP)?;
    let _ = parser.parse_keyword(Keyword::TEMPORARY);
    let view = if parser.parse_keyword(Keyword::TABLE) {
        false
    } else if parser.parse_keyword(Keyword::VIEW) {
        true
    } else {
        return parser.expected("TABLE or VIEW after DROP", parser.peek_token());
    };
    let if_exists = parser.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let name = object_name(parser)?;
    Ok(Statement::Drop(Drop {
        view,
        name,
        if_exists,
    }))
}

/// Turns a sqlparser error into ours, lifting " at Line: l, Column: c" into a position.
pub fn parser_error(e: ParserError) -> Error {
    let message = match e {
        ParserError::TokenizerError(m) | ParserError::ParserError(m) => m,
        ParserError::RecursionLimitExceeded => "statement is nested too deeply".to_string(),
    };
    match message.rfind(" at Line: ") {
        Some(at) => {
            let location = &message[at + " at Line: ".len()..];
            let mut parts = location.split(", Column: ");
            let line = parts.next().and_then(|l| l.trim().parse().ok());
            let column = parts.next().and_then(|c| {
                c.trim()
                    .split(|ch: char| !ch.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            });
            match (line, column) {
                (Some(line), Some(column)) => {
                    Error::sql_at(message[..at].to_string(), Some(Position { line, column }))
                }
                _ => Error::sql(message),
            }
        }
        None => Error::sql(message),
    }
}

/// Maps sqlparser's line/column locations to byte offsets of the text.
struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }

    fn offset(&self, text: &str, location: Location) -> usize {
        if location.line == 0 {
            return text.len();
        }
        let Some(&line_start) = self.starts.get(location.line as usize - 1) else {
            return text.len();
        };
        text[line_start..]
            .char_indices()
            .nth(location.column.saturating_sub(1) as usize)
            .map_or(text.len(), |(i, _)| line_start + i)
    }

    fn slice<'a>(&self, text: &'a str, start: Location, end: Location) -> &'a str {
        let (s, e) = (self.offset(text, start), self.offset(text, end));
        &text[s..e.max(s)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_table_with_computed_column_watermark_and_options() {
        let sql = "CREATE TABLE bids (\n  auction BIGINT, price BIGINT NOT NULL,\n  ms BIGINT,\n  ts AS TO_TIMESTAMP_LTZ(ms, 3),\n  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND\n) WITH ('connector' = 'filesystem', 'path' = 'data/bids.csv');";
        let statements = parse_statements(sql).unwrap();
        assert_eq!(statements.len(), 1);
        let Statement::CreateTable(t) = &statements[0].statement else {
            panic!("not a CREATE TABLE")
        };
        assert_eq!(t.name, "bids");
        let names: Vec<&str> = t.columns.iter().map(ColumnSpec::name).collect();
        assert_eq!(names, ["auction", "price", "ms", "ts"]);
        assert!(matches!(
            &t.columns[1],
            ColumnSpec::Physical { nullable: false, .. }
        ));
        assert!(matches!(&t.columns[3], ColumnSpec::Computed { .. }));
        let wm = t.watermark.as_ref().unwrap();
        assert_eq!(wm.column, "ts");
        assert_eq!(wm.text, "ts - INTERVAL '2' SECOND");
        assert_eq!(
            t.options,
            vec![
                ("connector".to_string(), "filesystem".to_string()),
                ("path".to_string(), "data/bids.csv".to_string())
            ]
        );
    }

    #[test]
    fn several_statements_keep_their_text_and_line() {
        let sql = "SET 'parallelism.default' = '4';\n\nSELECT 1;\n-- a comment\nRESET;";
        let statements = parse_statements(sql).unwrap();
        assert_eq!(statements.len(), 3);
        assert!(matches!(
            &statements[0].statement,
            Statement::Set { assignment: Some((k, v)) } if k == "parallelism.default" && v == "4"
        ));
        assert_eq!(statements[1].text, "SELECT 1");
        assert_eq!(statements[1].position.line, 3);
        assert!(matches!(statements[2].statement, Statement::Reset { key: None }));
    }

    #[test]
    fn window_tvf_with_table_argument_parses() {
        let sql =
            "SELECT * FROM TABLE(HOP(TABLE bids, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND))";
        let statements = parse_statements(sql).unwrap();
        assert!(matches!(statements[0].statement, Statement::Query(_)));
        let sql = "SELECT * FROM TABLE(SESSION(TABLE bids PARTITION BY auction, DESCRIPTOR(ts), INTERVAL '2' SECOND))";
        assert!(parse_statements(sql).is_ok());
    }

    #[test]
    fn syntax_error_names_line_and_column() {
        let err = parse_statements("SELECT 1;\nSELEC x FROM t;").unwrap_err();
        match err {
            Error::Sql { position, .. } => {
                assert_eq!(position, Some(Position { line: 2, column: 1 }))
            }
            other => panic!("unexpected {other:?}"),
        }
        let err = parse_statements("CREATE TABLE t (a BIGINT, b FOO)")
            .unwrap_err()
            .to_string();
        assert!(err.contains("FOO") && err.contains("line 1, column 29"), "{err}");
    }

    #[test]
    fn explain_wraps_the_inner_statement() {
        let statements = parse_statements("EXPLAIN PLAN FOR INSERT INTO out SELECT * FROM t").unwrap();
        let Statement::Explain { inner, .. } = &statements[0].statement else {
            panic!("not an EXPLAIN")
        };
        assert!(matches!(inner.statement, Statement::Insert(_)));
        assert_eq!(inner.text, "INSERT INTO out SELECT * FROM t");
    }
}
