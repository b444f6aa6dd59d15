//! Tab completion for the shell: SQL keywords and the session's table names.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use rustyline::completion::{Completer, Pair};
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::{Context, Helper};

/// Words offered after a few letters.
const KEYWORDS: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "BY",
    "HAVING",
    "INSERT",
    "INTO",
    "VALUES",
    "CREATE",
    "TABLE",
    "TEMPORARY",
    "VIEW",
    "FUNCTION",
    "DROP",
    "IF",
    "EXISTS",
    "NOT",
    "WITH",
    "WATERMARK",
    "FOR",
    "AS",
    "INTERVAL",
    "SECOND",
    "MINUTE",
    "HOUR",
    "DAY",
    "TUMBLE",
    "HOP",
    "CUMULATE",
    "SESSION",
    "DESCRIPTOR",
    "window_start",
    "window_end",
    "window_time",
    "PARTITIONED",
    "PRIMARY",
    "KEY",
    "ENFORCED",
    "SET",
    "RESET",
    "SHOW",
    "TABLES",
    "VIEWS",
    "FUNCTIONS",
    "JOBS",
    "DESCRIBE",
    "EXPLAIN",
    "STOP",
    "JOB",
    "SOURCE",
    "HELP",
    "QUIT",
    "EXIT",
    "COUNT",
    "SUM",
    "AVG",
    "MIN",
    "MAX",
    "CAST",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "AND",
    "OR",
    "NULL",
    "TIMESTAMP",
    "TIMESTAMP_LTZ",
    "BIGINT",
    "INT",
    "STRING",
    "DOUBLE",
    "BOOLEAN",
    "DECIMAL",
    "PROCTIME",
    "TO_TIMESTAMP_LTZ",
    "DATE_FORMAT",
];

/// Completes keywords and table names; `tables` is refreshed after each statement.
pub struct ShellHelper {
    /// The session's tables and views.
    pub tables: Arc<Mutex<Vec<String>>>,
}

impl Completer for ShellHelper {
    type Candidate = Pair;

    fn complete(&self, line: &str, pos: usize, _ctx: &Context<'_>) -> rustyline::Result<(usize, Vec<Pair>)> {
        let start = line[..pos]
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let word = &line[start..pos];
        if word.is_empty() {
            return Ok((pos, vec![]));
        }
        let tables = self.tables.lock().map(|t| t.clone()).unwrap_or_default();
        let mut candidates: Vec<Pair> = tables
            .iter()
            .map(String::as_str)
            .filter(|t| t.starts_with(word))
            .chain(
                KEYWORDS
                    .iter()
                    .copied()
                    .filter(|k| k.to_lowercase().starts_with(&word.to_lowercase())),
            )
            .map(|w| {
                // Keywords keep the case the user started typing in.
                let replacement =
                    if KEYWORDS.contains(&w) && word.chars().all(|c| c.is_lowercase() || c == '_') {
                        w.to_lowercase()
                    } else {
                        w.to_string()
                    };
                Pair {
                    display: w.to_string(),
                    replacement,
                }
            })
            .collect();
        candidates.dedup_by(|a, b| a.replacement == b.replacement);
        Ok((start, candidates))
    }
}

impl Hinter for ShellHelper {
    type Hint = String;
}

impl Highlighter for ShellHelper {
    fn highlight_prompt<'b, 's: 'b, 'p: 'b>(&'s self, prompt: &'p str, _default: bool) -> Cow<'b, str> {
        Cow::Borrowed(prompt)
    }
}

impl Validator for ShellHelper {}

impl Helper for ShellHelper {}
