//! Splits typed text into statements at top-level `;` (not in quotes or
//! comments), keeping an unfinished statement for the next line.

use sqlparser::dialect::GenericDialect;
use sqlparser::tokenizer::{Token, Tokenizer};

/// Text typed so far that does not end a statement yet.
#[derive(Debug, Default)]
pub struct StatementBuffer {
    pending: String,
}

impl StatementBuffer {
    /// True when nothing is waiting for a `;`.
    pub fn is_empty(&self) -> bool {
        self.pending.trim().is_empty() || only_comments(&self.pending)
    }

    /// Forgets the unfinished statement (Ctrl-C at the prompt).
    pub fn clear(&mut self) {
        self.pending.clear();
    }

    /// Adds a line; returns the statements it completes (without the `;`).
    pub fn push_line(&mut self, line: &str) -> Vec<String> {
        if !self.pending.is_empty() {
            self.pending.push('\n');
        }
        self.pending.push_str(line);
        let (complete, rest) = split(&self.pending);
        self.pending = rest;
        complete
    }

    /// What is left at the end of input (a last statement without `;`).
    pub fn finish(&mut self) -> Option<String> {
        let rest = std::mem::take(&mut self.pending);
        (!rest.trim().is_empty() && !only_comments(&rest)).then(|| rest.trim().to_string())
    }
}

fn only_comments(text: &str) -> bool {
    match Tokenizer::new(&GenericDialect {}, text).tokenize() {
        Ok(tokens) => tokens.iter().all(|t| matches!(t, Token::Whitespace(_))),
        Err(_) => false,
    }
}

/// Complete statements of `text`, and the unfinished rest. Text that does
/// not tokenize yet (an open quote) is all unfinished.
pub fn split(text: &str) -> (Vec<String>, String) {
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, text).tokenize_with_location() else {
        return (vec![], text.to_string());
    };
    let mut statements = Vec::new();
    let mut start = 0;
    let lines: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let offset = |line: u64, column: u64| -> usize {
        let line_start = lines
            .get(line.saturating_sub(1) as usize)
            .copied()
            .unwrap_or(text.len());
        // Columns count characters, 1-based.
        text[line_start..]
            .char_indices()
            .nth(column.saturating_sub(1) as usize)
            .map_or(text.len(), |(i, _)| line_start + i)
    };
    for token in &tokens {
        if token.token == Token::SemiColon {
            let at = offset(token.span.start.line, token.span.start.column);
            let statement = text[start..at].trim();
            if !statement.is_empty() && !only_comments(statement) {
                statements.push(statement.to_string());
            }
            start = at + 1;
        }
    }
    (statements, text[start..].trim_start_matches('\n').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_end_at_semicolons_outside_quotes_and_comments() {
        let (done, rest) = split("SELECT ';' AS a; -- x; y\nSELECT 2; SELECT");
        assert_eq!(done, vec!["SELECT ';' AS a", "-- x; y\nSELECT 2"]);
        assert_eq!(rest, " SELECT");
    }

    #[test]
    fn a_statement_spans_lines_until_its_semicolon() {
        let mut buffer = StatementBuffer::default();
        assert!(buffer.push_line("SELECT").is_empty());
        assert!(!buffer.is_empty());
        assert!(buffer.push_line("  'it''s;").is_empty(), "inside a string");
        assert_eq!(buffer.push_line("' AS s;"), vec!["SELECT\n  'it''s;\n' AS s"]);
        assert!(buffer.is_empty());
    }

    #[test]
    fn comments_alone_are_no_statement() {
        let mut buffer = StatementBuffer::default();
        assert!(buffer.push_line("-- just a comment").is_empty());
        assert!(buffer.is_empty());
        assert_eq!(buffer.finish(), None);
    }
}
