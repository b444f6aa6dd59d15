//! Formats of the filesystem connector (`csv`, `json`) and Flink's text forms of values.

pub mod csv;
pub mod json;
pub mod records;
pub mod text;

/// Runs a parse of Arrow's, turning a panic into an error: arrow-cast 59
/// overflows an `i16` on decimal exponents of many digits
/// (`0E2734666666666666`), which panics where overflow is checked (found by
/// fuzzing; where it is not, the exponent wraps).
pub(crate) fn unpanicked<T>(parse: impl FnOnce() -> crate::Result<T>) -> crate::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(parse)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(crate::Error::Execution(format!(
            "the value parser failed: {message}"
        )))
    })
}
