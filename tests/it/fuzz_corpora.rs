//! A short replay of the fuzz corpora (`fuzz/corpus/<target>/`): every
//! input the fuzzers kept, fed to the same entry points, must give a result
//! (an error at worst), never a panic.

use std::path::Path;

type Target = fn(&[u8]) -> weir::Result<()>;

fn sql(bytes: &[u8]) -> weir::Result<()> {
    match std::str::from_utf8(bytes) {
        Ok(text) => weir::fuzz::sql(text),
        Err(_) => Ok(()),
    }
}

const TARGETS: [(&str, Target); 5] = [
    ("sql", sql),
    ("csv", weir::fuzz::csv),
    ("json", weir::fuzz::json),
    ("checkpoint_metadata", weir::fuzz::checkpoint_metadata),
    ("state_file", weir::fuzz::state_file),
];

#[test]
fn every_fuzz_corpus_input_gives_an_error_or_a_result_never_a_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz").join("corpus");
    for (name, target) in TARGETS {
        let dir = root.join(name);
        let mut inputs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "no corpus for {name}");
        for input in inputs {
            let bytes = std::fs::read(&input).unwrap();
            let outcome = std::panic::catch_unwind(|| target(&bytes));
            assert!(outcome.is_ok(), "{name} panicked on {}", input.display());
        }
    }
}
