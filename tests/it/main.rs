//! Integration tests: one binary for all of them, to keep link time down.

mod api;
mod cli;
mod differential;
mod errors;
