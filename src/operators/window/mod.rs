//! Window operators: slicing arithmetic, window aggregation, window assignment.

pub mod accumulate;
pub mod aggregate;
pub mod assign;
pub mod count;
pub mod session;
pub mod spec;

#[cfg(test)]
mod tests;
