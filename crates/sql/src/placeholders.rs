//! `${NAME}` placeholders in a SQL script, filled in as Nexmark's scripts
//! fill its files (`${TPS}`, `${NEXMARK_TABLE}`, `${FLINK_HOME}`, ...), so
//! that `weir run` takes those files unchanged.

/// `sql` with each `${NAME}` replaced by `value(NAME)`; the first name
/// without a value is the error, with its byte offset.
pub fn substitute(sql: &str, value: impl Fn(&str) -> Option<String>) -> Result<String, (String, usize)> {
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    let mut offset = 0;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start + 2..].find('}') else {
            break;
        };
        let name = &rest[start + 2..start + 2 + len];
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.push_str(&rest[..start + 2]);
            offset += start + 2;
            rest = &rest[start + 2..];
            continue;
        }
        let filled = value(name).ok_or_else(|| (name.to_string(), offset + start))?;
        out.push_str(&rest[..start]);
        out.push_str(&filled);
        offset += start + 3 + len;
        rest = &rest[start + 3 + len..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(name: &str) -> Option<String> {
        match name {
            "TPS" => Some("1000".into()),
            "NEXMARK_TABLE" => Some("datagen".into()),
            _ => None,
        }
    }

    #[test]
    fn placeholders_are_filled_and_other_dollar_text_is_kept() {
        assert_eq!(
            substitute(
                "SELECT * FROM ${NEXMARK_TABLE} WHERE x = '${TPS}' AND y = '$z ${ not}'",
                values
            ),
            Ok("SELECT * FROM datagen WHERE x = '1000' AND y = '$z ${ not}'".to_string())
        );
    }

    #[test]
    fn a_placeholder_without_a_value_is_named_with_its_offset() {
        assert_eq!(
            substitute("a\n${FLINK_HOME}/data", values),
            Err(("FLINK_HOME".to_string(), 2))
        );
    }
}
