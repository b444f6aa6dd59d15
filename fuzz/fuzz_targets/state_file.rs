//! Fuzz target: `weir::fuzz::state_file` on arbitrary bytes (errors are
//! fine, panics are not). weir turns a panic of the Parquet reader on a
//! damaged file into an error (`catch_unwind`), so the default panic hook
//! replaces libFuzzer's abort-on-panic one: a panic weir does not catch
//! still reaches libFuzzer, which reports it.
#![no_main]

libfuzzer_sys::fuzz_target!(
    init: {
        let _ = std::panic::take_hook();
    },
    |data: &[u8]| {
        let _ = weir::fuzz::state_file(data);
    }
);
