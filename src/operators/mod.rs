//! Operators: one file per operator.

pub mod calc;
pub mod union;
pub mod watermark;
pub mod window;
