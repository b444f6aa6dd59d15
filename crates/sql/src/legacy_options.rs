//! Flink's legacy connector descriptors (`'connector.type' = ...`), translated
//! to today's option keys.
//!
//! Flink before 1.11 declared tables with `connector.type`, `connector.path`,
//! `format.type` and friends; Nexmark's q13 still does. Flink 2 dropped them;
//! weir reads the ones a file table uses and refuses the rest by name, so an
//! old DDL either means exactly what it meant or fails clearly.

use crate::{Error, Result};

/// Legacy key → today's key; `None` marks a key that carried no meaning
/// beyond the descriptor machinery (versions, schema derivation) and is dropped.
const RENAMES: &[(&str, Option<&str>)] = &[
    ("connector.type", Some("connector")),
    ("connector.path", Some("path")),
    ("format.type", Some("format")),
    ("format.field-delimiter", Some("csv.field-delimiter")),
    ("format.quote-character", Some("csv.quote-character")),
    ("format.ignore-parse-errors", Some("csv.ignore-parse-errors")),
    ("format.allow-comments", Some("csv.allow-comments")),
    ("format.null-literal", Some("csv.null-literal")),
    ("connector.property-version", None),
    ("format.property-version", None),
    ("format.derive-schema", None),
];

/// True when `options` use the legacy descriptor form.
pub fn is_legacy(options: &[(String, String)]) -> bool {
    options.iter().any(|(k, _)| k == "connector.type")
}

/// Today's options for a table declared with legacy keys; other options pass
/// unchanged. Mixing `connector` with `connector.type`, and legacy keys weir
/// does not translate, are errors naming the table and the key.
pub fn translate(table: &str, options: Vec<(String, String)>) -> Result<Vec<(String, String)>> {
    if !is_legacy(&options) {
        return Ok(options);
    }
    if options.iter().any(|(k, _)| k == "connector") {
        return Err(Error::sql(format!(
            "table '{table}': give either 'connector' or the legacy 'connector.type', not both"
        )));
    }
    let mut out = Vec::with_capacity(options.len());
    for (key, value) in options {
        match RENAMES.iter().find(|(legacy, _)| *legacy == key) {
            Some((_, Some(new))) => out.push((new.to_string(), value)),
            Some((_, None)) => {}
            None if key.starts_with("connector.") || key.starts_with("format.") => {
                return Err(Error::sql(format!(
                    "table '{table}': legacy option '{key}' is not supported; \
                     declare the table with 'connector' and today's option keys"
                )));
            }
            None => out.push((key, value)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn legacy_filesystem_csv_table_becomes_todays_options() {
        let out = translate(
            "side_input",
            pairs(&[
                ("connector.type", "filesystem"),
                ("connector.path", "file:///tmp/x.txt"),
                ("format.type", "csv"),
                ("format.derive-schema", "true"),
            ]),
        )
        .unwrap();
        assert_eq!(
            out,
            pairs(&[
                ("connector", "filesystem"),
                ("path", "file:///tmp/x.txt"),
                ("format", "csv")
            ])
        );
    }

    #[test]
    fn todays_options_pass_unchanged() {
        let options = pairs(&[("connector", "filesystem"), ("format.type", "csv")]);
        assert_eq!(translate("t", options.clone()).unwrap(), options);
    }

    #[test]
    fn mixed_and_unknown_legacy_keys_are_refused_by_name() {
        let mixed = translate(
            "t",
            pairs(&[("connector.type", "filesystem"), ("connector", "filesystem")]),
        );
        assert!(mixed.unwrap_err().to_string().contains("not both"));
        let unknown = translate(
            "t",
            pairs(&[("connector.type", "kafka"), ("connector.topic", "x")]),
        );
        let message = unknown.unwrap_err().to_string();
        assert!(message.contains("'connector.topic'"), "{message}");
    }
}
