//! Window operators: window aggregation, window assignment.

pub mod accumulate;
pub mod aggregate;
pub mod assign;
pub mod count;
pub mod session;

#[cfg(test)]
mod tests;
