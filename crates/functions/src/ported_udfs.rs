//! Rust ports of the Java UDF classes that Flink SQL files name in
//! `CREATE FUNCTION f AS 'class'`, so that such a file runs unchanged under
//! `weir run`, the shell and `weir bench`.
//!
//! weir runs no Java. A `CREATE FUNCTION` resolves, in order: a function
//! the embedding program registered under that name
//! (`Engine::register_udf`, for any UDF of one's own), then a port
//! of the named class from [`port`], else it is an error naming both ways.
//! The ports are Nexmark's UDFs (q14's `CountChar`).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use arrow::datatypes::DataType;
use datafusion_common::{Result as DFResult, ScalarValue};
use datafusion_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};

/// The Java classes with a port here.
pub const PORTED_CLASSES: &[&str] = &["com.github.nexmark.flink.udf.CountChar"];

/// The port of Java class `class` as a function named `name`.
pub fn port(class: &str, name: &str) -> Option<ScalarUDF> {
    match class {
        "com.github.nexmark.flink.udf.CountChar" => Some(ScalarUDF::from(CountChar::named(name))),
        _ => None,
    }
}

/// Nexmark's q14 UDF `count_char(s, c)` (`com.github.nexmark.flink.udf.CountChar`):
/// how many bytes of `s` equal the first byte of `c` (0 for a NULL `s`).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CountChar {
    name: String,
    signature: Signature,
}

impl CountChar {
    /// The function, named `count_char`.
    pub fn new() -> Self {
        Self::named("count_char")
    }

    /// The function under another name (`CREATE FUNCTION name AS ...`).
    pub fn named(name: &str) -> Self {
        CountChar {
            name: name.to_string(),
            signature: Signature::exact(vec![DataType::Utf8, DataType::Utf8], Volatility::Immutable),
        }
    }
}

impl Default for CountChar {
    fn default() -> Self {
        Self::new()
    }
}

impl ScalarUDFImpl for CountChar {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DFResult<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        let arrays: Vec<ArrayRef> = ColumnarValue::values_to_arrays(&args.args)?;
        let (text, character) = (arrays[0].as_string::<i32>(), arrays[1].as_string::<i32>());
        let counts: Int64Array = (0..text.len())
            .map(|row| {
                if text.is_null(row) {
                    return Some(0);
                }
                if character.is_null(row) {
                    return None;
                }
                let wanted = *character.value(row).as_bytes().first()?;
                Some(text.value(row).bytes().filter(|b| *b == wanted).count() as i64)
            })
            .collect();
        if args.args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&counts, 0)?));
        }
        Ok(ColumnarValue::Array(Arc::new(counts)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ported_class_resolves_under_the_name_given() {
        for class in PORTED_CLASSES {
            let udf = port(class, "my_name").expect("a port");
            assert_eq!(udf.name(), "my_name");
        }
        assert!(port("com.example.Unknown", "f").is_none());
    }
}
