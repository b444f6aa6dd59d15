//! Integration tests: one binary for all of them, to keep link time down.

mod api;
mod cli;
mod cluster;
mod count_windows;
mod dashboard;
mod differential;
mod errors;
mod fuzz_corpora;
mod idle;
mod incremental;
mod inspect;
mod join_differential;
mod kafka;
mod lifecycle;
mod metrics;
mod nexmark;
mod over_differential;
mod partitioned;
mod plan_spec;
mod rank_differential;
mod recovery;
mod repl;
mod repl_pty;
mod rest;
mod s3;
mod savepoint;
mod spilling;
mod split;
mod wire;

use std::path::{Path, PathBuf};

/// The seed of a randomized test: `WEIR_TEST_SEED` to rerun one, else a
/// fresh one (each test prints the seed it used with a failure).
pub fn test_seed() -> u64 {
    std::env::var("WEIR_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random)
}

/// The visible part files of a sink directory (in-progress files are hidden).
pub fn part_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    files.sort();
    files
}

/// Every line of every visible part file, sorted.
pub fn part_file_lines(dir: &Path) -> Vec<String> {
    file_lines(&part_files(dir))
}

/// Every line of these files, sorted.
pub fn file_lines(files: &[PathBuf]) -> Vec<String> {
    let mut lines: Vec<String> = files
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    lines.sort();
    lines
}

/// An engine at this parallelism, in UTC so that times read the same anywhere.
pub fn engine(parallelism: usize) -> weir::Engine {
    let engine = weir::Engine::new();
    engine
        .set("parallelism.default", &parallelism.to_string())
        .unwrap();
    engine.set("table.local-time-zone", "UTC").unwrap();
    engine
}

/// Every row of `batches` as `a|b|c` text (NULL as `NULL`), sorted: results as
/// multisets.
pub fn sorted_rows(batches: &[arrow::record_batch::RecordBatch]) -> Vec<String> {
    use arrow::util::display::{ArrayFormatter, FormatOptions};
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for batch in batches {
        let formatters: Vec<ArrayFormatter> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for row in 0..batch.num_rows() {
            rows.push(
                formatters
                    .iter()
                    .map(|f| f.value(row).to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
    }
    rows.sort();
    rows
}
